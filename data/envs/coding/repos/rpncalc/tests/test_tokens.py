import unittest

from rpncalc.tokens import tokenize


class TokenizeTest(unittest.TestCase):
    def test_numbers_and_operators(self):
        self.assertEqual(tokenize("12+(3*4)"), [12, "+", "(", 3, "*", 4, ")"])

    def test_spaces(self):
        self.assertEqual(tokenize(" 7 -  2 "), [7, "-", 2])

    def test_multi_digit(self):
        self.assertEqual(tokenize("1024/256"), [1024, "/", 256])

    def test_empty(self):
        self.assertEqual(tokenize(""), [])

    def test_bad_character(self):
        with self.assertRaises(ValueError):
            tokenize("2 ^ 3")


if __name__ == "__main__":
    unittest.main()
