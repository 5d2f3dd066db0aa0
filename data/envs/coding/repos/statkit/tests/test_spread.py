import unittest

from statkit.spread import histogram, percentile, variance, zscores


class VarianceTest(unittest.TestCase):
    def test_population(self):
        self.assertEqual(variance([2, 4, 4, 4, 5, 5, 7, 9]), 4)

    def test_sample(self):
        self.assertEqual(variance([1, 2, 3, 4], sample=True), 5 / 3)

    def test_sample_needs_two(self):
        with self.assertRaises(ValueError):
            variance([1], sample=True)


class PercentileTest(unittest.TestCase):
    def test_nearest_rank(self):
        data = [15, 20, 35, 40, 50]
        self.assertEqual(percentile(data, 30), 20)
        self.assertEqual(percentile(data, 40), 20)
        self.assertEqual(percentile(data, 50), 35)
        self.assertEqual(percentile(data, 100), 50)

    def test_zero(self):
        self.assertEqual(percentile([3, 1, 2], 0), 1)

    def test_range(self):
        with self.assertRaises(ValueError):
            percentile([1, 2], 101)


class ZscoreTest(unittest.TestCase):
    def test_zscores(self):
        self.assertEqual(zscores([2, 4, 4, 4, 5, 5, 7, 9]), [-1.5, -0.5, -0.5, -0.5, 0, 0, 1, 2])


class HistogramTest(unittest.TestCase):
    def test_bins(self):
        self.assertEqual(histogram([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 5, 0, 10), [2, 2, 2, 2, 2])

    def test_upper_edge_in_last_bin(self):
        self.assertEqual(histogram([10], 5, 0, 10), [0, 0, 0, 0, 1])

    def test_out_of_range_ignored(self):
        self.assertEqual(histogram([-1, 11, 5], 2, 0, 10), [0, 1])


if __name__ == "__main__":
    unittest.main()
