import unittest

from cartkit.cart import Cart
from cartkit.pricing import apply_discount, bulk_discount, format_cents, tax, total


class DiscountTest(unittest.TestCase):
    def test_apply_discount(self):
        self.assertEqual(apply_discount(1000, 15), 850)
        self.assertEqual(apply_discount(999, 10), 900)

    def test_discount_bounds(self):
        self.assertEqual(apply_discount(500, 0), 500)
        self.assertEqual(apply_discount(500, 100), 0)
        with self.assertRaises(ValueError):
            apply_discount(500, 101)

    def test_bulk_thresholds(self):
        self.assertEqual(bulk_discount(9), 0)
        self.assertEqual(bulk_discount(10), 5)
        self.assertEqual(bulk_discount(99), 5)
        self.assertEqual(bulk_discount(100), 15)


class TaxTest(unittest.TestCase):
    def test_rounding(self):
        self.assertEqual(tax(1000, 8), 80)
        self.assertEqual(tax(125, 10), 13)
        self.assertEqual(tax(124, 10), 12)


class TotalTest(unittest.TestCase):
    def test_small_order(self):
        cart = Cart()
        cart.add("book", 1200, 2)
        self.assertEqual(total(cart, tax_rate=10), 2640)

    def test_bulk_order(self):
        cart = Cart()
        cart.add("pen", 100, 10)
        self.assertEqual(total(cart), 950)

    def test_coupon(self):
        cart = Cart()
        cart.add("book", 1000, 1)
        self.assertEqual(total(cart, coupon=300), 700)
        self.assertEqual(total(cart, coupon=5000), 0)


class FormatTest(unittest.TestCase):
    def test_format(self):
        self.assertEqual(format_cents(1234), "$12.34")
        self.assertEqual(format_cents(5), "$0.05")

    def test_negative(self):
        self.assertEqual(format_cents(-5), "-$0.05")


if __name__ == "__main__":
    unittest.main()
