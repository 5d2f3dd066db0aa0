import unittest

from datekit.formatting import iso, long_form, month_name, parse_iso


class FormattingTest(unittest.TestCase):
    def test_month_names(self):
        self.assertEqual(month_name(1), "January")
        self.assertEqual(month_name(12), "December")

    def test_month_name_range(self):
        with self.assertRaises(ValueError):
            month_name(13)

    def test_iso_pads(self):
        self.assertEqual(iso(987, 3, 4), "0987-03-04")

    def test_long_form(self):
        self.assertEqual(long_form(2024, 3, 1), "1 March 2024")


class ParseTest(unittest.TestCase):
    def test_round_trip(self):
        self.assertEqual(parse_iso("2024-02-29"), (2024, 2, 29))
        self.assertEqual(parse_iso(" 2023-12-31\n"), (2023, 12, 31))

    def test_rejects_missing_day(self):
        with self.assertRaises(ValueError):
            parse_iso("2023-02-29")
        with self.assertRaises(ValueError):
            parse_iso("2023-04-00")

    def test_rejects_shape(self):
        with self.assertRaises(ValueError):
            parse_iso("2023/01/01")


if __name__ == "__main__":
    unittest.main()
