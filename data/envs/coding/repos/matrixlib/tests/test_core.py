import unittest

from matrixlib.core import add, identity, scale, shape, transpose, zeros


class ConstructionTest(unittest.TestCase):
    def test_zeros(self):
        self.assertEqual(zeros(2, 3), [[0, 0, 0], [0, 0, 0]])

    def test_zeros_rows_are_distinct(self):
        m = zeros(2, 2)
        m[0][0] = 5
        self.assertEqual(m[1][0], 0)

    def test_identity(self):
        self.assertEqual(identity(3), [[1, 0, 0], [0, 1, 0], [0, 0, 1]])

    def test_shape(self):
        self.assertEqual(shape([[1, 2, 3], [4, 5, 6]]), (2, 3))
        self.assertEqual(shape([]), (0, 0))


class ElementwiseTest(unittest.TestCase):
    def test_transpose(self):
        self.assertEqual(transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])

    def test_transpose_twice(self):
        m = [[1, 2], [3, 4], [5, 6]]
        self.assertEqual(transpose(transpose(m)), m)

    def test_add(self):
        self.assertEqual(add([[1, 2], [3, 4]], [[10, 20], [30, 40]]), [[11, 22], [33, 44]])

    def test_add_shape_mismatch(self):
        with self.assertRaises(ValueError):
            add([[1, 2]], [[1], [2]])

    def test_scale(self):
        self.assertEqual(scale([[1, -2], [0, 3]], 3), [[3, -6], [0, 9]])


if __name__ == "__main__":
    unittest.main()
