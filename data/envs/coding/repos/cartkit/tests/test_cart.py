import unittest

from cartkit.cart import Cart


class CartTest(unittest.TestCase):
    def setUp(self):
        self.cart = Cart()

    def test_empty(self):
        self.assertEqual(self.cart.count(), 0)
        self.assertEqual(self.cart.subtotal(), 0)

    def test_add(self):
        self.cart.add("apple", 50, 3)
        self.assertEqual(self.cart.quantity("apple"), 3)
        self.assertEqual(self.cart.subtotal(), 150)

    def test_add_default_quantity(self):
        self.cart.add("pear", 80)
        self.assertEqual(self.cart.count(), 1)

    def test_add_same_sku_accumulates(self):
        self.cart.add("apple", 50, 2)
        self.cart.add("apple", 999, 1)
        self.assertEqual(self.cart.quantity("apple"), 3)
        self.assertEqual(self.cart.subtotal(), 150)

    def test_add_rejects_non_positive(self):
        with self.assertRaises(ValueError):
            self.cart.add("apple", 50, 0)

    def test_remove_some(self):
        self.cart.add("apple", 50, 3)
        self.cart.remove("apple", 2)
        self.assertEqual(self.cart.quantity("apple"), 1)

    def test_remove_all(self):
        self.cart.add("apple", 50, 2)
        self.cart.remove("apple", 2)
        self.assertEqual(self.cart.quantity("apple"), 0)
        self.assertNotIn("apple", self.cart.items)

    def test_remove_unknown(self):
        with self.assertRaises(KeyError):
            self.cart.remove("kiwi")

    def test_count_over_skus(self):
        self.cart.add("a", 1, 2)
        self.cart.add("b", 1, 5)
        self.assertEqual(self.cart.count(), 7)


if __name__ == "__main__":
    unittest.main()
