"""Calendar arithmetic on the proleptic Gregorian calendar."""

_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    """True for years divisible by 4, except centuries not divisible by 400."""
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month(year, month):
    """Number of days of `month` (1-12) in `year`."""
    if month < 1 or month > 12:
        raise ValueError("month must be in 1..12")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS[month - 1]


def days_in_year(year):
    """365 or 366."""
    return 366 if is_leap_year(year) else 365


def day_of_year(year, month, day):
    """1-based ordinal of the date within its year."""
    total = day
    for m in range(1, month):
        total += days_in_month(year, m)
    return total


def weekday(year, month, day):
    """0 = Monday ... 6 = Sunday (Zeller's congruence)."""
    if month < 3:
        month += 12
        year -= 1
    k = year % 100
    j = year // 100
    h = (day + (13 * (month + 1)) // 5 + k + k // 4 + j // 4 + 5 * j) % 7
    return (h + 5) % 7


def add_days(year, month, day, n):
    """The date n >= 0 days after the given one, as a (year, month, day) tuple."""
    if n < 0:
        raise ValueError("n must not be negative")
    while n > 0:
        left = days_in_month(year, month) - day
        if n <= left:
            return (year, month, day + n)
        n -= left + 1
        day = 1
        month += 1
        if month > 12:
            month = 1
            year += 1
    return (year, month, day)
