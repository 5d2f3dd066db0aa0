"""Palindromes, run-length encoding and the Caesar cipher."""


def is_palindrome(text):
    """True when the letters and digits read the same backwards (case-insensitive)."""
    chars = [c.lower() for c in text if c.isalnum()]
    return chars == chars[::-1]


def rle_encode(text):
    """'aaabcc' -> '3a1b2c'."""
    if not text:
        return ""
    out = []
    run = text[0]
    count = 1
    for ch in text[1:]:
        if ch == run:
            count += 1
        else:
            out.append(f"{count}{run}")
            run = ch
            count = 1
    out.append(f"{count}{run}")
    return "".join(out)


def rle_decode(text):
    """'3a1b2c' -> 'aaabcc'."""
    out = []
    num = ""
    for ch in text:
        if ch.isdigit():
            num += ch
        else:
            if not num:
                raise ValueError("missing count")
            out.append(ch * int(num))
            num = ""
    return "".join(out)


def caesar(text, shift):
    """Shifts ASCII letters by shift places, keeping case; other characters stay."""
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + shift) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + shift) % 26 + 65))
        else:
            out.append(ch)
    return "".join(out)


def count_vowels(text):
    """Number of a, e, i, o, u (either case)."""
    return sum(1 for c in text.lower() if c in "aeiou")
