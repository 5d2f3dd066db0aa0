"""Traversals, shortest paths, components and topological order."""

from collections import deque


def bfs_order(graph, start):
    """Nodes in breadth-first order from start (neighbours in sorted order)."""
    seen = {start}
    order = []
    queue = deque([start])
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return order


def shortest_path(graph, start, goal):
    """A shortest path from start to goal as a list of nodes, or None."""
    prev = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for nxt in sorted(graph[node]):
            if nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    if goal not in prev:
        return None
    path = []
    node = goal
    while node is not None:
        path.append(node)
        node = prev[node]
    path.reverse()
    return path


def components(graph):
    """Connected components of an undirected graph, each sorted, in order of their least node."""
    seen = set()
    out = []
    for node in sorted(graph):
        if node in seen:
            continue
        comp = bfs_order(graph, node)
        seen.update(comp)
        out.append(sorted(comp))
    return out


def topo_sort(graph):
    """Kahn's algorithm, taking the smallest ready node first; raises on a cycle."""
    indegree = {node: 0 for node in graph}
    for node in graph:
        for nxt in graph[node]:
            indegree[nxt] += 1
    ready = sorted(node for node in graph if indegree[node] == 0)
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for nxt in sorted(graph[node]):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
                ready.sort()
    if len(order) != len(graph):
        raise ValueError("graph has a cycle")
    return order
