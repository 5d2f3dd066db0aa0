import unittest

from rpncalc.rpn import eval_rpn, evaluate, to_rpn


class ToRpnTest(unittest.TestCase):
    def test_precedence(self):
        self.assertEqual(to_rpn([1, "+", 2, "*", 3]), [1, 2, 3, "*", "+"])

    def test_left_associative(self):
        self.assertEqual(to_rpn([8, "-", 3, "-", 2]), [8, 3, "-", 2, "-"])

    def test_parentheses(self):
        self.assertEqual(to_rpn(["(", 1, "+", 2, ")", "*", 3]), [1, 2, "+", 3, "*"])

    def test_unbalanced(self):
        with self.assertRaises(ValueError):
            to_rpn(["(", 1, "+", 2])
        with self.assertRaises(ValueError):
            to_rpn([1, ")"])


class EvalRpnTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(eval_rpn([3, 4, "+"]), 7)

    def test_order_of_operands(self):
        self.assertEqual(eval_rpn([10, 4, "-"]), 6)
        self.assertEqual(eval_rpn([20, 6, "/"]), 3)

    def test_not_enough_operands(self):
        with self.assertRaises(ValueError):
            eval_rpn([1, "+"])

    def test_leftover_operands(self):
        with self.assertRaises(ValueError):
            eval_rpn([1, 2])

    def test_division_by_zero(self):
        with self.assertRaises(ZeroDivisionError):
            eval_rpn([1, 0, "/"])


class EvaluateTest(unittest.TestCase):
    def test_expression(self):
        self.assertEqual(evaluate("2 + 3 * 4"), 14)

    def test_grouping(self):
        self.assertEqual(evaluate("(2 + 3) * 4"), 20)

    def test_chain(self):
        self.assertEqual(evaluate("100 / 10 / 5"), 2)
        self.assertEqual(evaluate("10 - 4 + 3"), 9)

    def test_floor_division(self):
        self.assertEqual(evaluate("7 / 2"), 3)

    def test_nested(self):
        self.assertEqual(evaluate("((1 + 2) * (3 + 4)) - 5"), 16)


if __name__ == "__main__":
    unittest.main()
