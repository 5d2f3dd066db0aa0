"""Roman numeral conversion."""

_TABLE = [
    (1000, "M"),
    (500, "D"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
]


def to_roman(number):
    """Converts 1 <= number <= 3999 to a Roman numeral."""
    if not 1 <= number <= 3999:
        raise ValueError("out of range")
    out = []
    for value, symbol in _TABLE:
        while number >= value:
            out.append(symbol)
            number -= value
    return "".join(out)
