import unittest

from intervals.merge import merge_intervals


class MergeTest(unittest.TestCase):
    def test_overlap(self):
        self.assertEqual(merge_intervals([(1, 3), (2, 5)]), [(1, 5)])

    def test_disjoint(self):
        self.assertEqual(merge_intervals([(1, 2), (4, 5)]), [(1, 2), (4, 5)])


if __name__ == "__main__":
    unittest.main()
