"""Matrices as lists of rows."""


def zeros(rows, cols):
    """A rows x cols matrix of zeros."""
    return [[0] * cols for _ in range(rows)]


def identity(n):
    """The n x n identity matrix."""
    m = zeros(n, n)
    for i in range(n):
        m[i][i] = 1
    return m


def shape(m):
    """(rows, cols)."""
    return (len(m), len(m[0]) if m else 0)


def transpose(m):
    """Rows become columns."""
    rows, cols = shape(m)
    return [[m[r][c] for r in range(rows)] for c in range(cols)]


def add(a, b):
    """Elementwise sum of two matrices of the same shape."""
    if shape(a) != shape(b):
        raise ValueError("shape mismatch")
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def scale(m, k):
    """Every entry times k."""
    return [[k * x for x in row] for row in m]
