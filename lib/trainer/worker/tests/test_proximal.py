"""Decoupled PPO on the engine: π_prox comes from the update's first pass and is passed back on
later epochs, so the ratio there is π_θ / π_prox (the clip engages), not π_θ / π_θ (always 1)."""

import math
import unittest

from reins_worker.engine import Engine
from reins_worker.validate import RequestError, parse_forward_backward, parse_init
from tests.tiny import tiny_config

CONFIG = tiny_config(32)


def row(tokens, adv: float, behaviour_shift: float = 0.0):
    n = len(tokens)
    mask = [0, 0] + [1] * (n - 2)
    return {
        "tokens": tokens,
        "loss_mask": mask,
        "advantages": [adv] * n,
        "loss_weights": [m / (2 * (n - 2)) for m in mask],
        # A stale behaviour policy: its logprobs sit off the current policy's.
        "rollout_logprobs": [-math.log(32) + behaviour_shift * m for m in mask],
    }


class ProximalTest(unittest.TestCase):
    def setUp(self) -> None:
        self.engine = Engine()
        self.engine.init(
            parse_init(
                {
                    "model": {"kind": "builtin", "config": CONFIG, "seed": 1},
                    "optimizer": {"lr": 0.05, "grad_clip": 0},
                    "device": "cpu",
                }
            )
        )
        self.rows = [row([1, 2, 3, 4, 5, 6, 7, 8], 1.0, 0.3), row([1, 9, 10, 11, 12, 13], -1.0)]
        self.loss = {"kind": "ppo", "old_logprobs": "recompute", "tis_cap": 2.0}

    def fb(self, proximal=None, return_logprobs=False):
        body = {"rows": self.rows, "loss": self.loss, "return_logprobs": return_logprobs}
        if proximal is not None:
            body["proximal_logprobs"] = proximal
        rows, loss, want = parse_forward_backward(body, 32, 64)
        return self.engine.forward_backward(rows, loss, want)

    def test_first_pass_logprobs_reproduce_its_proximal_policy_exactly(self) -> None:
        first = self.fb(return_logprobs=True)
        self.assertEqual(first["metrics"]["clip_fraction"], 0.0)
        self.engine.zero_grad()
        again = self.fb(proximal=first["logprobs"])
        self.assertEqual(again["metrics"]["ratio_min"], 1.0)
        self.assertEqual(again["metrics"]["ratio_max"], 1.0)
        self.assertEqual(again["loss"], first["loss"])

    def test_later_epochs_clip_against_the_proximal_policy(self) -> None:
        first = self.fb(return_logprobs=True)
        self.engine.optim_step()  # a large step: lr 0.05, no gradient clipping
        without = self.fb()  # the pre-fix path: π_old = this pass's own logprobs
        self.engine.zero_grad()
        with_prox = self.fb(proximal=first["logprobs"])
        self.assertEqual(without["metrics"]["clip_fraction"], 0.0)
        self.assertEqual(without["metrics"]["ratio_max"], 1.0)
        self.assertGreater(with_prox["metrics"]["clip_fraction"], 0.0)
        self.assertGreater(with_prox["metrics"]["ratio_max"], 1.2)

    def test_proximal_logprobs_are_validated_naming_the_field(self) -> None:
        cases = [
            ({"proximal_logprobs": [[0.0] * 8]}, "proximal_logprobs"),
            ({"proximal_logprobs": [[0.0] * 8, [0.0] * 5]}, "proximal_logprobs[1]"),
            (
                {"proximal_logprobs": [[0.0] * 8, [0.0] * 5 + [float("nan")]]},
                "proximal_logprobs[1][5]",
            ),
            (
                {"proximal_logprobs": [[0.0] * 8, [0.0] * 6], "loss": {"kind": "ppo"}},
                "proximal_logprobs",
            ),
        ]
        for extra, field in cases:
            body = {"rows": self.rows, "loss": self.loss, **extra}
            with self.assertRaises(RequestError) as ctx:
                parse_forward_backward(body, 32, 64)
            self.assertEqual(ctx.exception.field, field)


if __name__ == "__main__":
    unittest.main()
