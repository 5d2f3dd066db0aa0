"""KL regularisation to a frozen reference policy: Schulman's estimators on worked numbers, the
reference held only when a call asks for the penalty, copied from the policy as /init loaded it
or read from a checkpoint, and the loss adding exactly kl_coef · Σ w · k."""

import math
import os
import tempfile
import unittest

import torch

from reins_worker.engine import Engine
from reins_worker.losses import KL_ESTIMATORS, LOSSES
from reins_worker import contract
from reins_worker.validate import RequestError, parse_forward_backward, parse_init
from tests.tiny import tiny_config

CONFIG = tiny_config(32)


def row(tokens, adv: float):
    n = len(tokens)
    mask = [0] + [1] * (n - 1)
    return {
        "tokens": tokens,
        "loss_mask": mask,
        "advantages": [adv] * n,
        "loss_weights": [m / (n - 1) for m in mask],
        "rollout_logprobs": [-math.log(32) * m for m in mask],
    }


ROWS = [row([1, 2, 3, 4, 5, 6], 1.0), row([1, 7, 8, 9], -1.0)]


def init_body(**extra):
    body = {
        "model": {"kind": "builtin", "config": CONFIG, "seed": 3},
        "optimizer": {"lr": 0.05, "grad_clip": 0},
        "device": "cpu",
    }
    body.update(extra)
    return parse_init(body)


class EstimatorTest(unittest.TestCase):
    def test_the_registries_are_the_contracts_enums(self):
        loss = contract.node("forward_backward", "loss")
        self.assertEqual(set(LOSSES), set(contract.enum(contract.properties(loss)["kind"])))
        estimators = contract.enum(contract.properties(loss)["kl_estimator"])
        self.assertEqual(set(KL_ESTIMATORS), set(estimators))

    def test_worked_numbers(self):
        # x = log π_ref − log π_θ: x = 0.5 and x = −1.
        new = torch.tensor([-1.5, -0.5], dtype=torch.float64)
        ref = torch.tensor([-1.0, -1.5], dtype=torch.float64)
        k1 = KL_ESTIMATORS["k1"](new, ref).tolist()
        k2 = KL_ESTIMATORS["k2"](new, ref).tolist()
        k3 = KL_ESTIMATORS["k3"](new, ref).tolist()
        self.assertEqual(k1, [-0.5, 1.0])
        self.assertEqual(k2, [0.125, 0.5])
        self.assertAlmostEqual(k3[0], math.exp(0.5) - 1.5, places=12)
        self.assertAlmostEqual(k3[1], math.exp(-1.0), places=12)


class ReferenceEngineTest(unittest.TestCase):
    def fb(self, engine: Engine, **loss):
        rows, spec, lp = parse_forward_backward(
            {"rows": ROWS, "loss": {"kind": "ppo", **loss}}, 32, 64
        )
        return engine.forward_backward(rows, spec, lp)

    def step(self, engine: Engine) -> None:
        self.fb(engine)
        engine.optim_step()

    def test_no_reference_is_held_while_kl_coef_is_0(self):
        engine = Engine()
        engine.init(init_body())
        out = self.fb(engine)
        self.assertIsNone(engine.reference.model)
        self.assertEqual(out["metrics"]["kl_ref_mean"], 0.0)
        self.assertIsNone(engine.state()["reference"])

    def test_the_penalty_adds_kl_coef_times_the_weighted_estimate(self):
        engine = Engine()
        engine.init(init_body())
        first = self.fb(engine, kl_coef=0.5)  # copies the policy: π_ref = π_θ here
        self.assertEqual(engine.state()["reference"], "init")
        self.assertEqual(first["metrics"]["kl_ref_mean"], 0.0)
        engine.zero_grad()
        for _ in range(3):
            self.step(engine)
        # π_θ moved: k3 > 0, and the loss grows by exactly kl_coef · Σ w · k3.
        plain = self.fb(engine)["loss"]
        engine.zero_grad()
        for name in ("k1", "k2", "k3"):
            out = self.fb(engine, kl_coef=0.5, kl_estimator=name)
            engine.zero_grad()
            rows, _, _ = parse_forward_backward({"rows": ROWS, "loss": {"kind": "ce"}}, 32, 64)
            new = self.logprobs(engine.model, rows)
            ref = self.logprobs(engine.reference.model, rows)
            weights = torch.tensor(
                [w for r in ROWS for w, m in zip(r["loss_weights"], r["loss_mask"]) if m]
            )
            k = KL_ESTIMATORS[name](new, ref)
            self.assertAlmostEqual(out["metrics"]["kl_ref_mean"], float(k.mean()), places=5)
            self.assertAlmostEqual(out["loss"] - plain, 0.5 * float((weights * k).sum()), places=5)
        self.assertGreater(out["metrics"]["kl_ref_mean"], 0.0)

    @staticmethod
    def logprobs(model, rows):
        out = []
        for r in rows:
            tokens = torch.tensor([r.tokens])
            positions = torch.arange(len(r.tokens))[None]
            with torch.no_grad():
                logits = model(tokens, positions, None, True).float()[0]
            lp = torch.log_softmax(logits, -1)
            out += [float(lp[t - 1, r.tokens[t]]) for t in range(1, len(r.tokens))]
        return torch.tensor(out)

    def test_a_moved_policy_without_a_reference_is_refused_naming_kl_coef(self):
        engine = Engine()
        engine.init(init_body())
        self.step(engine)
        with self.assertRaises(RequestError) as ctx:
            self.fb(engine, kl_coef=0.1)
        self.assertEqual(ctx.exception.status, 409)
        self.assertEqual(ctx.exception.field, "loss.kl_coef")
        self.assertIsNone(engine.reference.model)

    def test_reference_path_reads_the_reference_from_a_checkpoint(self):
        with tempfile.TemporaryDirectory() as tmp:
            start = os.path.join(tmp, "start.pt")
            later = os.path.join(tmp, "later.pt")
            engine = Engine()
            engine.init(init_body())
            engine.save(start)
            for _ in range(3):
                self.step(engine)
            engine.save(later)
            moved = self.fb(engine, kl_coef=0.0)["loss"]
            engine.zero_grad()
            # Resuming: the policy from the later checkpoint, π_ref from the run's start.
            resumed = Engine()
            resumed.init(
                parse_init(
                    {"model": {"kind": "checkpoint", "path": later}, "device": "cpu",
                     "reference_path": start}
                )
            )
            self.assertEqual(resumed.state()["reference"], start)
            out = self.fb(resumed, kl_coef=1.0)
            self.assertGreater(out["metrics"]["kl_ref_mean"], 0.0)
            self.assertGreater(out["loss"], moved)
            # A reference of another architecture is refused before anything changes.
            other = Engine()
            other.init(init_body())
            before = other.state()["param_checksum"]
            wrong = dict(CONFIG, d_ff=64)
            with self.assertRaises(RequestError) as ctx:
                other.init(
                    parse_init(
                        {"model": {"kind": "builtin", "config": wrong}, "device": "cpu",
                         "reference_path": start}
                    )
                )
            self.assertEqual(ctx.exception.field, "reference_path")
            self.assertEqual(other.state()["param_checksum"], before)


if __name__ == "__main__":
    unittest.main()
