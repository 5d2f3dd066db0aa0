import unittest

from matrixlib.algebra import determinant, multiply, power, trace
from matrixlib.core import identity


class MultiplyTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(multiply([[1, 2], [3, 4]], [[5, 6], [7, 8]]), [[19, 22], [43, 50]])

    def test_rectangular(self):
        self.assertEqual(multiply([[1, 2, 3]], [[1], [2], [3]]), [[14]])
        self.assertEqual(multiply([[1], [2]], [[3, 4]]), [[3, 4], [6, 8]])

    def test_identity_is_neutral(self):
        m = [[2, -1], [0, 5]]
        self.assertEqual(multiply(identity(2), m), m)

    def test_mismatch(self):
        with self.assertRaises(ValueError):
            multiply([[1, 2]], [[1, 2]])


class TraceTest(unittest.TestCase):
    def test_trace(self):
        self.assertEqual(trace([[1, 2], [3, 4]]), 5)
        self.assertEqual(trace([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), 15)


class DeterminantTest(unittest.TestCase):
    def test_one_by_one(self):
        self.assertEqual(determinant([[7]]), 7)

    def test_two_by_two(self):
        self.assertEqual(determinant([[3, 8], [4, 6]]), -14)

    def test_three_by_three(self):
        self.assertEqual(determinant([[6, 1, 1], [4, -2, 5], [2, 8, 7]]), -306)

    def test_four_by_four(self):
        m = [[1, 0, 2, -1], [3, 0, 0, 5], [2, 1, 4, -3], [1, 0, 5, 0]]
        self.assertEqual(determinant(m), 30)

    def test_not_square(self):
        with self.assertRaises(ValueError):
            determinant([[1, 2]])


class PowerTest(unittest.TestCase):
    def test_zero_power(self):
        self.assertEqual(power([[2, 3], [4, 5]], 0), [[1, 0], [0, 1]])

    def test_fibonacci(self):
        self.assertEqual(power([[1, 1], [1, 0]], 10), [[89, 55], [55, 34]])

    def test_odd_power(self):
        self.assertEqual(power([[2, 0], [0, 3]], 3), [[8, 0], [0, 27]])

    def test_negative(self):
        with self.assertRaises(ValueError):
            power([[1]], -1)


if __name__ == "__main__":
    unittest.main()
