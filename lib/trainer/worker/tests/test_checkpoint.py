"""Checkpoints: random generators round-trip, and a Hugging Face policy's checkpoint resumes.

`transformers` is not installable here, so the HF test stands the built-in decoder in for the
architecture `load_hf` rebuilds; what it checks is the engine's part: the checkpoint records the
model's source, `/init` with `{"kind": "checkpoint"}` rebuilds from it and loads the saved weights.
"""

import os
import random
import tempfile
import unittest
from unittest import mock

import numpy as np
import torch

from reins_worker import hf_model
from reins_worker.engine import Engine
from reins_worker.model import ModelConfig, build_builtin
from reins_worker.validate import parse_init

from .tiny import tiny_config


def draws():
    return (torch.rand(3).tolist(), random.random(), float(np.random.rand()))


class CheckpointTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "step.pt")

    def test_rng_states_round_trip(self) -> None:
        engine = Engine()
        engine.init(parse_init({"model": {"kind": "builtin", "config": tiny_config(16), "seed": 1}}))
        engine.save(self.path)
        expected = draws()
        draws()  # the generators move on
        engine.load(self.path)
        self.assertEqual(draws(), expected)

    def test_hf_checkpoint_resumes(self) -> None:
        config = ModelConfig(**tiny_config(24))
        calls = []

        def fake_load_hf(path: str):
            calls.append(path)
            return build_builtin(config, seed=len(calls)), config  # fresh weights every time

        with mock.patch.object(hf_model, "load_hf", fake_load_hf):
            engine = Engine()
            engine.init(parse_init({"model": {"kind": "hf", "path": "/models/tiny-hf"}}))
            with torch.no_grad():
                for p in engine.model.parameters():
                    p.add_(0.5)  # trained weights, unlike anything load_hf builds
            engine.policy_version = 7
            engine.save(self.path)
            saved = {k: v.clone() for k, v in engine.model.state_dict().items()}

            resumed = Engine()
            state = resumed.init(parse_init({"model": {"kind": "checkpoint", "path": self.path}}))
            self.assertEqual(state["model_kind"], "hf")
            self.assertEqual(state["source"], "/models/tiny-hf")
            self.assertEqual(state["policy_version"], 7)
            self.assertEqual(calls, ["/models/tiny-hf", "/models/tiny-hf"])
            for k, v in resumed.model.state_dict().items():
                self.assertTrue(torch.equal(v, saved[k]), k)
            # and /load of the same file (optimizer, version, generators) is accepted
            self.assertEqual(resumed.load(self.path)["policy_version"], 7)


if __name__ == "__main__":
    unittest.main()
