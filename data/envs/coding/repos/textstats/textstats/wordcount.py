"""Word counting."""


def count_words(text):
    """Returns the number of words in text (words are separated by any whitespace)."""
    if not text:
        return 0
    return len(text.split(" "))


def most_common(text):
    """Returns the most common word (lower-cased); ties go to the earliest word."""
    counts = {}
    order = []
    for word in text.lower().split():
        if word not in counts:
            counts[word] = 0
            order.append(word)
        counts[word] += 1
    best = None
    for word in order:
        if best is None or counts[word] > counts[best]:
            best = word
    return best
