import unittest

from graphkit.graph import build, degree, edge_count


class BuildTest(unittest.TestCase):
    def test_undirected(self):
        self.assertEqual(build([(1, 2), (2, 3)]), {1: [2], 2: [1, 3], 3: [2]})

    def test_directed(self):
        self.assertEqual(build([(1, 2), (2, 3)], directed=True), {1: [2], 2: [3], 3: []})

    def test_degree(self):
        g = build([(1, 2), (1, 3), (1, 4)])
        self.assertEqual(degree(g, 1), 3)
        self.assertEqual(degree(g, 4), 1)

    def test_edge_count(self):
        self.assertEqual(edge_count(build([(1, 2), (2, 3), (3, 1)])), 3)
        self.assertEqual(edge_count(build([(1, 2), (2, 3)], directed=True), directed=True), 2)


if __name__ == "__main__":
    unittest.main()
