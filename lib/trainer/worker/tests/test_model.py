"""The built-in decoder: seeded init, cached decoding, explicit masks and positions."""

import unittest

import torch

from reins_worker import model as M

CONFIG = M.ModelConfig(
    vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=64
)


def causal(t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()[None, None]


class ModelTest(unittest.TestCase):
    def setUp(self) -> None:
        self.model = M.build_builtin(CONFIG, seed=11)
        self.tokens = torch.tensor([[3, 9, 1, 22, 7, 5, 31, 2]])
        self.positions = torch.arange(8)[None]

    def test_same_seed_same_weights_and_global_rng_untouched(self) -> None:
        torch.manual_seed(0)
        expected = torch.rand(1)
        torch.manual_seed(0)
        other = M.build_builtin(CONFIG, seed=11)
        self.assertTrue(torch.equal(torch.rand(1), expected))
        for a, b in zip(self.model.parameters(), other.parameters()):
            self.assertTrue(torch.equal(a, b))
        third = M.build_builtin(CONFIG, seed=12)
        self.assertFalse(torch.equal(self.model.embed.weight, third.embed.weight))

    def test_explicit_causal_mask_equals_is_causal(self) -> None:
        with torch.no_grad():
            a = self.model(self.tokens, self.positions, None, True)
            b = self.model(self.tokens, self.positions, causal(8), False)
        self.assertLess((a - b).abs().max().item(), 1e-5)

    def test_manual_attention_matches_reference_softmax(self) -> None:
        q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
        mask = causal(5)
        ref = torch.softmax(
            (q @ k.transpose(-1, -2) / 8**0.5).masked_fill(~mask, float("-inf")), -1
        ) @ v
        self.assertLess((M.attention(q, k, v, mask, False) - ref).abs().max().item(), 1e-5)

    def test_kv_cache_decoding_equals_full_forward(self) -> None:
        with torch.no_grad():
            full = self.model(self.tokens, self.positions, None, True)
            cache = self.model.new_cache(1, 8, torch.float32)
            first = self.model(self.tokens[:, :5], self.positions[:, :5], causal(5), False, cache)
            steps = [first[:, -1]]
            for i in range(5, 8):
                mask = torch.ones(1, 1, 1, i + 1, dtype=torch.bool)
                out = self.model(self.tokens[:, i : i + 1], self.positions[:, i : i + 1], mask,
                                 False, cache)
                steps.append(out[:, -1])
        for j, logits in enumerate(steps):
            self.assertLess((logits - full[:, 4 + j]).abs().max().item(), 1e-4)

    def test_positions_matter_and_masks_cut_attention(self) -> None:
        with torch.no_grad():
            a = self.model(self.tokens, self.positions, None, True)
            shifted = self.model(self.tokens, self.positions + 3, None, True)
            # RoPE is relative: a uniform shift changes nothing...
            self.assertLess((a - shifted).abs().max().item(), 1e-4)
            reset = self.positions.clone()
            reset[0, 4:] = torch.arange(4)
            mask = causal(8).clone()
            mask[..., 4:, :4] = False
            b = self.model(self.tokens, reset, mask, False)
            alone = self.model(self.tokens[:, 4:], self.positions[:, :4], None, True)
        # ...and a packed second segment sees only itself.
        self.assertLess((b[:, 4:] - alone).abs().max().item(), 1e-5)
        self.assertGreater((b[:, 4:] - a[:, 4:]).abs().max().item(), 1e-3)

    def test_flops_parameter_count(self) -> None:
        n = M.non_embedding_matmul_params(CONFIG)
        untied = M.build_builtin(M.ModelConfig(**{**CONFIG.to_dict(), "tie_embeddings": False}), 0)
        norms = sum(p.numel() for name, p in untied.named_parameters() if "norm" in name)
        self.assertEqual(n, M.parameter_count(untied) - norms - CONFIG.vocab_size * CONFIG.d_model)


if __name__ == "__main__":
    unittest.main()
