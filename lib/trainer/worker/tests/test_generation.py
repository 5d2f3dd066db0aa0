"""Continuous batching: joining a running batch, compaction and cache growth change nothing."""

import unittest

import _path  # noqa: F401

from engine import Engine, GenJob
from generation import BatchDecoder
from validate import parse_generate, parse_init

CONFIG = {
    "vocab_size": 48,
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "d_ff": 48,
    "max_seq_len": 256,
}


def job(engine: Engine, prompt, max_tokens: int, seed: int, out: list) -> GenJob:
    spec = parse_generate(
        {"prompt_ids": prompt, "max_tokens": max_tokens, "seed": seed},
        engine.vocab_size,
        engine.max_seq_len,
    )
    return GenJob(spec, lambda ids, lps: out.extend(zip(ids, lps)), lambda r, v: None)


class GenerationTest(unittest.TestCase):
    def setUp(self) -> None:
        self.engine = Engine()
        self.engine.init(parse_init({"model": {"kind": "builtin", "config": CONFIG, "seed": 3},
                                     "device": "cpu"}))

    def alone(self, prompt, max_tokens, seed):
        out: list = []
        self.engine.generate_batch([job(self.engine, prompt, max_tokens, seed, out)])
        return out

    def test_staggered_admission_matches_alone(self) -> None:
        specs = [([1, 2, 3], 150, 1), ([4], 5, 2), ([5, 6, 7, 8, 9, 10, 11], 30, 3), ([12], 2, 4)]
        outs = [[] for _ in specs]
        decoder = BatchDecoder(self.engine)
        # Join at steps 0, 3, 3 and 40 (after the short ones finished and were compacted away).
        plan = {0: [0], 3: [1, 2], 40: [3]}
        step = 0
        while step == 0 or decoder.active:
            for i in plan.get(step, []):
                prompt, n, seed = specs[i]
                decoder.admit([job(self.engine, prompt, n, seed, outs[i])])
            decoder.step()
            step += 1
        for (prompt, n, seed), got in zip(specs, outs):
            want = self.alone(prompt, n, seed)
            self.assertEqual([t for t, _ in got], [t for t, _ in want])
            for (_, a), (_, b) in zip(got, want):
                self.assertAlmostEqual(a, b, places=4)


if __name__ == "__main__":
    unittest.main()
