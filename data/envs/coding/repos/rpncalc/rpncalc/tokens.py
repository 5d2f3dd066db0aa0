"""Splits an expression into integers and operator characters."""

OPERATORS = "+-*/()"


def tokenize(text):
    """'12+(3*4)' -> [12, '+', '(', 3, '*', 4, ')']."""
    tokens = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            tokens.append(int(text[i:j]))
            i = j
        elif ch in OPERATORS:
            tokens.append(ch)
            i += 1
        else:
            raise ValueError(f"unexpected character {ch!r}")
    return tokens
