"""Loss formulas on raw tensors, including their gradients."""

import math
import unittest

import torch

from reins_worker.losses import LossInputs, k3_kl, policy_loss
from reins_worker.validate import LossSpec


def inputs(log_ratio, adv, weights, seq=None, behaviour_shift=None):
    old = torch.tensor([-1.0, -2.0, -0.5, -3.0][: len(log_ratio)])
    new = (old + torch.tensor(log_ratio)).requires_grad_(True)
    behaviour = old if behaviour_shift is None else old - torch.tensor(behaviour_shift)
    return LossInputs(
        new_logprobs=new,
        old_logprobs=old,
        behaviour_logprobs=behaviour,
        advantages=torch.tensor(adv),
        weights=torch.tensor(weights),
        sequence_ids=torch.tensor(
            seq if seq is not None else [0] * len(log_ratio), dtype=torch.long
        ),
    )


def grad_of(x: LossInputs) -> torch.Tensor:
    grad = x.new_logprobs.grad
    assert grad is not None, "backward() ran"
    return grad


class LossTest(unittest.TestCase):
    def test_ppo_gradient_vanishes_where_clipped(self) -> None:
        x = inputs([math.log(1.5), math.log(1.1)], [1.0, 1.0], [1.0, 1.0])
        loss, metrics = policy_loss(LossSpec("ppo", 0.2, 0.2), x)
        loss.backward()
        grad = grad_of(x).tolist()
        self.assertEqual(grad[0], 0.0)  # ratio 1.5 > 1.2 with A > 0: clipped, no gradient
        self.assertAlmostEqual(grad[1], -1.1, places=5)  # d(−A·r)/dlogp = −A·r
        self.assertAlmostEqual(metrics["clip_fraction"], 0.5)

    def test_gspo_gradient_is_the_sequence_level_one(self) -> None:
        # Two sequences; weights 1/|y| per token make Σ_t w ℓ = ℓ_seq.
        lr = [0.001, -0.002, 0.0005, 0.0]
        x = inputs(lr, [1.0, 1.0, -2.0, -2.0], [0.5, 0.5, 0.5, 0.5], seq=[0, 0, 1, 1])
        loss, _ = policy_loss(LossSpec("gspo", gspo_clip_low=0.01, gspo_clip_high=0.01), x)
        s0 = math.exp((lr[0] + lr[1]) / 2)
        s1 = math.exp((lr[2] + lr[3]) / 2)
        self.assertAlmostEqual(loss.item(), -s0 + 2 * s1, places=5)
        loss.backward()
        g = grad_of(x).tolist()
        # ∂(−A·s)/∂logp_t = −A·s/|y| for each of the sequence's tokens
        for t, expected in enumerate([-s0 / 2, -s0 / 2, s1, s1]):
            self.assertAlmostEqual(g[t], expected, places=5)

    def test_tis_is_a_detached_capped_weight(self) -> None:
        x = inputs([0.0, 0.0], [1.0, 1.0], [1.0, 1.0], behaviour_shift=[math.log(0.5), math.log(9)])
        loss, _ = policy_loss(LossSpec("ppo", tis_cap=2.0), x)
        self.assertAlmostEqual(loss.item(), -(0.5 + 2.0), places=5)
        loss.backward()
        self.assertAlmostEqual(grad_of(x)[0].item(), -0.5, places=5)

    def test_ce_and_k3(self) -> None:
        x = inputs([0.0, 0.0], [0.0, 0.0], [0.25, 0.75])
        loss, _ = policy_loss(LossSpec("ce"), x)
        self.assertAlmostEqual(loss.item(), 0.25 * 1.0 + 0.75 * 2.0, places=5)
        k = k3_kl(torch.tensor([math.log(2.0)]), torch.tensor([0.0]))
        self.assertAlmostEqual(k.item(), 0.5 - 1 + math.log(2), places=6)

    def test_empty_input_gives_zero(self) -> None:
        x = inputs([], [], [])
        loss, metrics = policy_loss(LossSpec("gspo"), x)
        self.assertEqual(loss.item(), 0.0)
        self.assertEqual(metrics["tokens"], 0.0)


if __name__ == "__main__":
    unittest.main()
