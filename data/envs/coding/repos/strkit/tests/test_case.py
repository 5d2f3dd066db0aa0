import unittest

from strkit.case import camel_to_snake, snake_to_camel, truncate


class CaseTest(unittest.TestCase):
    def test_snake_to_camel(self):
        self.assertEqual(snake_to_camel("parse_http_header"), "parseHttpHeader")

    def test_snake_single_word(self):
        self.assertEqual(snake_to_camel("name"), "name")

    def test_camel_to_snake(self):
        self.assertEqual(camel_to_snake("parseHttpHeader"), "parse_http_header")

    def test_camel_leading_capital(self):
        self.assertEqual(camel_to_snake("HttpServer"), "http_server")

    def test_round_trip(self):
        self.assertEqual(camel_to_snake(snake_to_camel("one_two_three")), "one_two_three")


class TruncateTest(unittest.TestCase):
    def test_short_text_unchanged(self):
        self.assertEqual(truncate("hello", 5), "hello")

    def test_cut(self):
        self.assertEqual(truncate("hello world", 8), "hello...")

    def test_tiny_width(self):
        self.assertEqual(truncate("hello world", 2), "..")

    def test_custom_suffix(self):
        self.assertEqual(truncate("abcdefgh", 5, suffix="~"), "abcd~")


if __name__ == "__main__":
    unittest.main()
