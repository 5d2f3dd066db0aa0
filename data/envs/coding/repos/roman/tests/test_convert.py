import unittest

from roman.convert import to_roman


class ConvertTest(unittest.TestCase):
    def test_small(self):
        self.assertEqual(to_roman(14), "XIV")

    def test_range(self):
        with self.assertRaises(ValueError):
            to_roman(0)


if __name__ == "__main__":
    unittest.main()
