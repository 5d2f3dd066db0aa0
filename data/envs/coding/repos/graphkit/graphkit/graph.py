"""Adjacency-list graphs."""


def build(edges, directed=False):
    """Adjacency lists from (a, b) edges; every endpoint gets an entry."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
        if not directed:
            graph[b].append(a)
    return graph


def degree(graph, node):
    """Number of neighbours (out-neighbours for a directed graph)."""
    return len(graph[node])


def edge_count(graph, directed=False):
    """Number of edges."""
    total = sum(len(neighbours) for neighbours in graph.values())
    return total if directed else total // 2
