"""Interval merging."""


def merge_intervals(intervals):
    """Merges overlapping or touching closed intervals [a, b]; returns them sorted."""
    result = []
    for start, end in intervals:
        if result and start < result[-1][1]:
            result[-1][1] = max(result[-1][1], end)
        else:
            result.append([start, end])
    return [tuple(pair) for pair in result]
