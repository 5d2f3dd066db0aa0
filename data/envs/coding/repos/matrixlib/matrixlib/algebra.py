"""Products, trace, determinant and powers."""

from matrixlib.core import identity, shape, zeros


def multiply(a, b):
    """Matrix product a @ b."""
    ar, ac = shape(a)
    br, bc = shape(b)
    if ac != br:
        raise ValueError("shape mismatch")
    out = zeros(ar, bc)
    for i in range(ar):
        for j in range(bc):
            total = 0
            for k in range(ac):
                total += a[i][k] * b[k][j]
            out[i][j] = total
    return out


def trace(m):
    """Sum of the main diagonal."""
    total = 0
    for i in range(min(shape(m))):
        total += m[i][i]
    return total


def determinant(m):
    """Determinant by cofactor expansion along the first row."""
    n, cols = shape(m)
    if n != cols:
        raise ValueError("square matrix required")
    if n == 1:
        return m[0][0]
    if n == 2:
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]
    total = 0
    for j in range(n):
        minor = [row[:j] + row[j + 1:] for row in m[1:]]
        sign = 1 if j % 2 == 0 else -1
        total += sign * m[0][j] * determinant(minor)
    return total


def power(m, e):
    """m to the e-th power (e >= 0) by repeated squaring."""
    if e < 0:
        raise ValueError("negative exponent")
    result = identity(shape(m)[0])
    while e > 0:
        if e % 2 == 1:
            result = multiply(result, m)
        m = multiply(m, m)
        e //= 2
    return result
