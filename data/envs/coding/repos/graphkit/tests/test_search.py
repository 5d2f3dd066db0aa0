import unittest

from graphkit.graph import build
from graphkit.search import bfs_order, components, shortest_path, topo_sort


class BfsTest(unittest.TestCase):
    def test_order(self):
        g = build([(1, 2), (1, 3), (2, 4), (3, 4), (4, 5)])
        self.assertEqual(bfs_order(g, 1), [1, 2, 3, 4, 5])

    def test_single_node(self):
        self.assertEqual(bfs_order({7: []}, 7), [7])


class ShortestPathTest(unittest.TestCase):
    def test_path(self):
        g = build([(1, 2), (2, 3), (3, 4), (1, 5), (5, 4)])
        self.assertEqual(shortest_path(g, 1, 4), [1, 5, 4])

    def test_same_node(self):
        g = build([(1, 2)])
        self.assertEqual(shortest_path(g, 1, 1), [1])

    def test_unreachable(self):
        g = build([(1, 2), (3, 4)])
        self.assertIsNone(shortest_path(g, 1, 4))

    def test_longer_path(self):
        g = build([(1, 2), (2, 3), (3, 4), (4, 5)])
        self.assertEqual(shortest_path(g, 1, 5), [1, 2, 3, 4, 5])


class ComponentsTest(unittest.TestCase):
    def test_components(self):
        g = build([(1, 2), (3, 4), (4, 5)])
        g[6] = []
        self.assertEqual(components(g), [[1, 2], [3, 4, 5], [6]])


class TopoSortTest(unittest.TestCase):
    def test_chain(self):
        g = build([("a", "b"), ("b", "c")], directed=True)
        self.assertEqual(topo_sort(g), ["a", "b", "c"])

    def test_smallest_first(self):
        g = build([(3, 1), (2, 1), (4, 2)], directed=True)
        self.assertEqual(topo_sort(g), [3, 4, 2, 1])

    def test_diamond(self):
        g = build([(1, 2), (1, 3), (2, 4), (3, 4)], directed=True)
        self.assertEqual(topo_sort(g), [1, 2, 3, 4])

    def test_cycle(self):
        g = build([(1, 2), (2, 1)], directed=True)
        with self.assertRaises(ValueError):
            topo_sort(g)


if __name__ == "__main__":
    unittest.main()
