import unittest

from datekit.calendar_math import (
    add_days,
    day_of_year,
    days_in_month,
    days_in_year,
    is_leap_year,
    weekday,
)


class LeapYearTest(unittest.TestCase):
    def test_ordinary_leap_year(self):
        self.assertTrue(is_leap_year(2024))

    def test_common_year(self):
        self.assertFalse(is_leap_year(2023))

    def test_century_is_not_leap(self):
        self.assertFalse(is_leap_year(1900))

    def test_fourth_century_is_leap(self):
        self.assertTrue(is_leap_year(2000))


class MonthLengthTest(unittest.TestCase):
    def test_february(self):
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertEqual(days_in_month(2023, 2), 28)

    def test_thirty_and_thirty_one(self):
        self.assertEqual(days_in_month(2023, 4), 30)
        self.assertEqual(days_in_month(2023, 12), 31)
        self.assertEqual(days_in_month(2023, 1), 31)

    def test_bad_month(self):
        with self.assertRaises(ValueError):
            days_in_month(2023, 0)
        with self.assertRaises(ValueError):
            days_in_month(2023, 13)

    def test_days_in_year(self):
        self.assertEqual(days_in_year(2024), 366)
        self.assertEqual(days_in_year(2023), 365)


class OrdinalTest(unittest.TestCase):
    def test_first_day(self):
        self.assertEqual(day_of_year(2024, 1, 1), 1)

    def test_after_february(self):
        self.assertEqual(day_of_year(2024, 3, 1), 61)
        self.assertEqual(day_of_year(2023, 3, 1), 60)

    def test_last_day(self):
        self.assertEqual(day_of_year(2023, 12, 31), 365)


class WeekdayTest(unittest.TestCase):
    def test_known_mondays(self):
        self.assertEqual(weekday(2024, 1, 1), 0)
        self.assertEqual(weekday(2023, 12, 25), 0)

    def test_leap_day(self):
        self.assertEqual(weekday(2000, 2, 29), 1)

    def test_epoch(self):
        self.assertEqual(weekday(1970, 1, 1), 3)

    def test_sunday(self):
        self.assertEqual(weekday(2024, 6, 30), 6)


class AddDaysTest(unittest.TestCase):
    def test_within_month(self):
        self.assertEqual(add_days(2024, 5, 10, 5), (2024, 5, 15))

    def test_zero(self):
        self.assertEqual(add_days(2024, 1, 1, 0), (2024, 1, 1))

    def test_month_end(self):
        self.assertEqual(add_days(2024, 1, 31, 1), (2024, 2, 1))
        self.assertEqual(add_days(2024, 2, 28, 1), (2024, 2, 29))

    def test_year_end(self):
        self.assertEqual(add_days(2023, 12, 31, 1), (2024, 1, 1))

    def test_whole_year(self):
        self.assertEqual(add_days(2024, 1, 1, 366), (2025, 1, 1))

    def test_negative(self):
        with self.assertRaises(ValueError):
            add_days(2024, 1, 1, -1)


if __name__ == "__main__":
    unittest.main()
