import unittest

from strkit.codec import caesar, count_vowels, is_palindrome, rle_decode, rle_encode


class PalindromeTest(unittest.TestCase):
    def test_sentence(self):
        self.assertTrue(is_palindrome("A man, a plan, a canal: Panama"))

    def test_not_palindrome(self):
        self.assertFalse(is_palindrome("reins"))

    def test_empty(self):
        self.assertTrue(is_palindrome(""))


class RleTest(unittest.TestCase):
    def test_encode(self):
        self.assertEqual(rle_encode("aaabcc"), "3a1b2c")

    def test_encode_empty(self):
        self.assertEqual(rle_encode(""), "")

    def test_encode_long_run(self):
        self.assertEqual(rle_encode("x" * 12), "12x")

    def test_decode(self):
        self.assertEqual(rle_decode("3a1b2c"), "aaabcc")
        self.assertEqual(rle_decode("12x"), "x" * 12)

    def test_decode_missing_count(self):
        with self.assertRaises(ValueError):
            rle_decode("a")

    def test_round_trip(self):
        text = "wwwwaaadexxxxxx"
        self.assertEqual(rle_decode(rle_encode(text)), text)


class CaesarTest(unittest.TestCase):
    def test_shift(self):
        self.assertEqual(caesar("abc", 1), "bcd")

    def test_wraps(self):
        self.assertEqual(caesar("xyz", 3), "abc")
        self.assertEqual(caesar("XYZ", 3), "ABC")

    def test_keeps_other_characters(self):
        self.assertEqual(caesar("Hi, you!", 13), "Uv, lbh!")

    def test_negative_shift(self):
        self.assertEqual(caesar("abc", -1), "zab")


class VowelTest(unittest.TestCase):
    def test_count(self):
        self.assertEqual(count_vowels("Reinforcement"), 5)
        self.assertEqual(count_vowels("rhythm"), 0)


if __name__ == "__main__":
    unittest.main()
