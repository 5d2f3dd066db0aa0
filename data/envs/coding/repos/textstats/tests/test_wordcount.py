import unittest

from textstats.wordcount import count_words, most_common


class WordCountTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(count_words("a b c"), 3)

    def test_empty(self):
        self.assertEqual(count_words(""), 0)

    def test_most_common(self):
        self.assertEqual(most_common("b a b"), "b")


if __name__ == "__main__":
    unittest.main()
