import unittest

from statkit.central import mean, median, midrange, mode


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mean([])


class MedianTest(unittest.TestCase):
    def test_odd(self):
        self.assertEqual(median([5, 1, 3]), 3)

    def test_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_single(self):
        self.assertEqual(median([7]), 7)


class ModeTest(unittest.TestCase):
    def test_mode(self):
        self.assertEqual(mode([1, 2, 2, 3, 3, 3]), 3)

    def test_tie_goes_to_smallest(self):
        self.assertEqual(mode([4, 4, 1, 1, 9]), 1)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mode([])


class MidrangeTest(unittest.TestCase):
    def test_midrange(self):
        self.assertEqual(midrange([3, 9, 1, 4]), 5)


if __name__ == "__main__":
    unittest.main()
