"""Formatting and parsing of dates."""

from datekit.calendar_math import days_in_month

MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def month_name(month):
    """English name of month 1-12."""
    if not 1 <= month <= 12:
        raise ValueError("month must be in 1..12")
    return MONTHS[month - 1]


def iso(year, month, day):
    """YYYY-MM-DD."""
    return f"{year:04d}-{month:02d}-{day:02d}"


def parse_iso(text):
    """Parses YYYY-MM-DD into a (year, month, day) tuple, checking the day exists."""
    parts = text.strip().split("-")
    if len(parts) != 3:
        raise ValueError(f"not an ISO date: {text!r}")
    year, month, day = (int(p) for p in parts)
    if day < 1 or day > days_in_month(year, month):
        raise ValueError(f"no such day: {text!r}")
    return (year, month, day)


def long_form(year, month, day):
    """'1 March 2024'."""
    return f"{day} {month_name(month)} {year}"
