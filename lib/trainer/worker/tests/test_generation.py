"""The one generation path (the scheduler over the batch decoder): joining a running batch,
compaction and cache growth change nothing; failures reach every job; sampling is batched."""

import threading
import unittest
from typing import List, Optional, Tuple

import torch

from reins_worker.engine import Engine
from reins_worker.generation import BatchDecoder, GenerateScheduler, GenJob
from reins_worker.sampling import make_generator, sample_rows
from reins_worker.validate import RequestError, parse_generate, parse_init
from tests.tiny import tiny_config

CONFIG = tiny_config(48, max_seq_len=256)


class Collect:
    """A job's callbacks, recorded; `done` is set on finish or failure."""

    def __init__(self) -> None:
        self.out: List[Tuple[int, float]] = []
        self.reason: Optional[str] = None
        self.error: Optional[RequestError] = None
        self.done = threading.Event()

    def job(self, engine: Engine, prompt, max_tokens: int, seed: int, **extra) -> GenJob:
        spec = parse_generate(
            {"prompt_ids": prompt, "max_tokens": max_tokens, "seed": seed, **extra},
            engine.vocab_size or 1000,
            engine.max_seq_len or 1000,
        )
        return GenJob(spec, self.emit, self.finish, self.fail)

    def emit(self, ids: List[int], lps: List[float]) -> None:
        self.out.extend(zip(ids, lps))

    def finish(self, reason: str, _version: int) -> None:
        self.reason = reason
        self.done.set()

    def fail(self, err: RequestError) -> None:
        self.error = err
        self.done.set()


def init(engine: Engine) -> None:
    engine.init(
        parse_init({"model": {"kind": "builtin", "config": CONFIG, "seed": 3}, "device": "cpu"})
    )


class GenerationTest(unittest.TestCase):
    def setUp(self) -> None:
        self.engine = Engine()
        init(self.engine)
        self.scheduler = GenerateScheduler(self.engine, 0.0, 8)

    def alone(self, prompt, max_tokens, seed, **extra) -> Collect:
        c = Collect()
        self.scheduler.submit(c.job(self.engine, prompt, max_tokens, seed, **extra))
        self.assertTrue(c.done.wait(60))
        self.assertIsNone(c.error)
        return c

    def test_staggered_admission_matches_alone(self) -> None:
        specs = [([1, 2, 3], 150, 1), ([4], 5, 2), ([5, 6, 7, 8, 9, 10, 11], 30, 3), ([12], 2, 4)]
        outs = [Collect() for _ in specs]
        decoder = BatchDecoder(self.engine)
        # Join at steps 0, 3, 3 and 40 (after the short ones finished and were compacted away).
        plan = {0: [0], 3: [1, 2], 40: [3]}
        step = 0
        while step == 0 or decoder.active:
            for i in plan.get(step, []):
                prompt, n, seed = specs[i]
                decoder.admit([outs[i].job(self.engine, prompt, n, seed)])
            decoder.step()
            step += 1
        for (prompt, n, seed), got in zip(specs, outs):
            want = self.alone(prompt, n, seed).out
            self.assertEqual([t for t, _ in got.out], [t for t, _ in want])
            for (_, a), (_, b) in zip(got.out, want):
                self.assertAlmostEqual(a, b, places=4)

    def test_scheduler_batches_concurrent_requests_like_single_ones(self) -> None:
        extra = [{}, {"top_p": 0.7}, {"temperature": 0}, {"temperature": 0.5, "top_p": 0.9}]
        alone = [self.alone([1, 2 + i], 12, 10 + i, **e).out for i, e in enumerate(extra)]
        together = [Collect() for _ in extra]
        scheduler = GenerateScheduler(self.engine, 0.2, 8)  # a window: one batch
        for i, (c, e) in enumerate(zip(together, extra)):
            scheduler.submit(c.job(self.engine, [1, 2 + i], 12, 10 + i, **e))
        for c, want in zip(together, alone):
            self.assertTrue(c.done.wait(60))
            self.assertEqual([t for t, _ in c.out], [t for t, _ in want])

    def test_a_failed_admission_fails_the_jobs_and_the_scheduler_lives_on(self) -> None:
        bare = Engine()  # no policy loaded: admission raises not_initialized
        scheduler = GenerateScheduler(bare, 0.0, 4)
        c = Collect()
        scheduler.submit(c.job(bare, [1, 2], 4, 0))
        self.assertTrue(c.done.wait(30), "the job was neither finished nor failed")
        assert c.error is not None
        self.assertEqual((c.error.status, c.error.code), (409, "not_initialized"))
        self.assertTrue(scheduler.thread.is_alive())
        init(bare)
        ok = Collect()
        scheduler.submit(ok.job(bare, [1, 2], 4, 0))
        self.assertTrue(ok.done.wait(60))
        self.assertEqual(len(ok.out), 4)

    def test_a_failing_decode_step_fails_every_active_job(self) -> None:
        c = Collect()
        job = c.job(self.engine, [1, 2], 50, 0)
        broken = BatchDecoder(self.engine)
        scheduler = GenerateScheduler(self.engine, 0.0, 4)

        def boom() -> int:
            raise RuntimeError("decode exploded")

        broken.step = boom  # type: ignore[method-assign]
        scheduler.decoder = broken
        scheduler.submit(job)
        self.assertTrue(c.done.wait(30))
        assert c.error is not None
        self.assertEqual(c.error.status, 500)
        self.assertIn("decode exploded", c.error.message)
        self.assertEqual(self.engine.generation_status()["generating"], 0)


class ReadBackTest(unittest.TestCase):
    def test_a_decode_step_reads_back_once_not_once_per_row(self) -> None:
        engine = Engine()
        init(engine)
        decoder = BatchDecoder(engine)
        outs = [Collect() for _ in range(6)]
        decoder.admit(
            [
                c.job(engine, [1, 2 + i], 20, i, top_p=0.8 if i % 2 else 1.0)
                for i, c in enumerate(outs)
            ]
        )
        calls = {"item": 0, "tolist": 0}
        item, tolist = torch.Tensor.item, torch.Tensor.tolist

        def counted(name, fn):
            def wrapper(self, *args, **kwargs):
                calls[name] += 1
                return fn(self, *args, **kwargs)

            return wrapper

        torch.Tensor.item = counted("item", item)  # type: ignore[method-assign]
        torch.Tensor.tolist = counted("tolist", tolist)  # type: ignore[method-assign]
        try:
            decoder.step()
        finally:
            torch.Tensor.item = item  # type: ignore[method-assign]
            torch.Tensor.tolist = tolist  # type: ignore[method-assign]
        self.assertEqual(calls["item"], 0)
        self.assertEqual(calls["tolist"], 2)  # tokens and logprobs, for all six rows
        self.assertTrue(all(len(c.out) == 1 for c in outs))


class SamplingTest(unittest.TestCase):
    def test_rows_match_their_own_distribution_and_read_nothing_back(self) -> None:
        torch.manual_seed(0)
        logits = torch.randn(3, 20)
        gens = [make_generator(s, torch.device("cpu")) for s in (1, 2, 3)]
        toks, lps = sample_rows(logits, [1.0, 0.0, 0.7], [1.0, 1.0, 0.5], gens)
        self.assertEqual(toks.shape, (3,))
        self.assertEqual(lps.dtype, torch.float32)
        t = toks.tolist()
        full = torch.log_softmax(logits[0], -1)
        self.assertAlmostEqual(lps[0].item(), full[t[0]].item(), places=6)
        self.assertEqual(t[1], int(torch.argmax(logits[1])))
        self.assertAlmostEqual(lps[1].item(), torch.log_softmax(logits[1], -1)[t[1]].item(), 6)
        # Nucleus: the token is inside the top-p set; its logprob renormalised over that set.
        p = torch.softmax(logits[2] / 0.7, -1)
        sp, order = torch.sort(p, descending=True)
        k = int(((torch.cumsum(sp, 0) - sp) < 0.5).sum())
        self.assertIn(t[2], order[:k].tolist())
        want = torch.log(p[t[2]] / sp[:k].sum())
        self.assertAlmostEqual(lps[2].item(), want.item(), places=5)


if __name__ == "__main__":
    unittest.main()
