"""Measures of central tendency."""


def mean(xs):
    """Arithmetic mean; raises on empty data."""
    if not xs:
        raise ValueError("empty data")
    return sum(xs) / len(xs)


def median(xs):
    """Middle value (mean of the two middle values for even sizes)."""
    if not xs:
        raise ValueError("empty data")
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    if n % 2 == 1:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2


def mode(xs):
    """Most frequent value; ties go to the smallest."""
    if not xs:
        raise ValueError("empty data")
    counts = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    best = None
    for x in sorted(counts):
        if best is None or counts[x] > counts[best]:
            best = x
    return best


def midrange(xs):
    """Mean of the minimum and the maximum."""
    if not xs:
        raise ValueError("empty data")
    return (min(xs) + max(xs)) / 2
