"""Spread, ranks and histograms."""

from statkit.central import mean


def variance(xs, sample=False):
    """Population variance, or the sample variance (n - 1) when sample is true."""
    n = len(xs)
    if sample and n < 2:
        raise ValueError("sample variance needs two values")
    m = mean(xs)
    ss = sum((x - m) ** 2 for x in xs)
    return ss / (n - 1) if sample else ss / n


def percentile(xs, p):
    """Nearest-rank percentile, 0 <= p <= 100."""
    if not 0 <= p <= 100:
        raise ValueError("p must be in 0..100")
    s = sorted(xs)
    if p == 0:
        return s[0]
    rank = -(-p * len(s) // 100)
    return s[rank - 1]


def zscores(xs):
    """(x - mean) / population standard deviation for each value."""
    m = mean(xs)
    sd = variance(xs) ** 0.5
    return [(x - m) / sd for x in xs]


def histogram(xs, bins, lo, hi):
    """Counts of values in `bins` equal-width bins over [lo, hi]; hi falls in the last bin."""
    counts = [0] * bins
    width = (hi - lo) / bins
    for x in xs:
        if x < lo or x > hi:
            continue
        i = int((x - lo) / width)
        if i == bins:
            i -= 1
        counts[i] += 1
    return counts
