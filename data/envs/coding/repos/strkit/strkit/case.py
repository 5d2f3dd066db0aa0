"""Identifier case conversion."""


def snake_to_camel(name):
    """'parse_http_header' -> 'parseHttpHeader'."""
    parts = name.split("_")
    return parts[0] + "".join(p.capitalize() for p in parts[1:])


def camel_to_snake(name):
    """'parseHttpHeader' -> 'parse_http_header'."""
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i > 0:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def truncate(text, width, suffix="..."):
    """text cut to at most width characters, ending in suffix when cut."""
    if len(text) <= width:
        return text
    if width <= len(suffix):
        return suffix[:width]
    return text[: width - len(suffix)] + suffix
