"""GGUF export: the v3 layout byte by byte, llama.cpp's qwen3 names and metadata, q8_0, q4_0,
vocab."""

import json
import os
import struct
import tempfile
import unittest

import numpy as np
import torch

from reins_worker import gguf_export as G
from reins_worker.model import ModelConfig, build_builtin

CHAR_TOKENIZER = os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "..", "data", "tokenizers", "char"
)
CONFIG = ModelConfig(
    vocab_size=107, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=128,
    tie_embeddings=False, rope_theta=1e6, norm_eps=1e-6,
)  # fmt: skip


class GGUFLayoutTest(unittest.TestCase):
    def test_a_tiny_file_is_laid_out_as_the_spec_says(self) -> None:
        w = G.GGUFWriter()
        w.add("general.architecture", G.STRING, "qwen3")
        w.add_array("xs", G.INT32, [1, -2])
        w.add_tensor("t", torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), "f32")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.gguf")
            w.write(path)
            with open(path, "rb") as f:
                raw = f.read()
        expected = b"GGUF" + struct.pack("<IQQ", 3, 1, 2)
        expected += struct.pack("<Q", 20) + b"general.architecture" + struct.pack("<I", 8)
        expected += struct.pack("<Q", 5) + b"qwen3"
        expected += struct.pack("<Q", 2) + b"xs" + struct.pack("<IIQ", 9, 5, 2)
        expected += struct.pack("<ii", 1, -2)
        # dims in ggml order: a [2, 3] torch tensor is ne = [3, 2]
        expected += struct.pack("<Q", 1) + b"t" + struct.pack("<I", 2) + struct.pack("<QQ", 3, 2)
        expected += struct.pack("<IQ", 0, 0)
        expected += b"\0" * (-len(expected) % 32)
        self.assertEqual(raw[: len(expected)], expected)
        data = np.frombuffer(raw[len(expected) :], dtype="<f4")
        self.assertEqual(data[:6].tolist(), [1, 2, 3, 4, 5, 6])
        self.assertEqual(len(raw) % 32, 0)

    def test_q8_0_blocks_follow_llama_cpps_reference(self) -> None:
        x = np.linspace(-2.0, 1.0, 32, dtype=np.float32)
        x[5] = 0.0
        raw = G.quantize_q8_0(x)
        self.assertEqual(len(raw), 34)
        d = np.frombuffer(raw[:2], dtype="<f2")[0]
        self.assertEqual(d, np.float16(2.0 / 127))
        q = np.frombuffer(raw[2:], dtype=np.int8)
        self.assertEqual(q[0], -127)
        self.assertEqual(q[5], 0)
        # round half away from zero, on x/d with the float32 d
        expected = np.sign(x / (2.0 / 127)) * np.floor(np.abs(x / np.float32(2.0 / 127)) + 0.5)
        self.assertEqual(q.tolist(), expected.astype(np.int8).tolist())
        back = G.dequantize_q8_0(raw, 32)
        self.assertLessEqual(np.abs(back - x).max(), float(d) * (0.5 + 127 * 2.0**-11))
        self.assertEqual(G.quantize_q8_0(np.zeros(32, np.float32))[2:], b"\0" * 32)

    def test_q4_0_blocks_follow_llama_cpps_reference(self) -> None:
        # The value of largest magnitude is -2 (signed): d = -2 / -8 = 0.25, and -2 gets code 0.
        x = np.linspace(-2.0, 1.0, 32, dtype=np.float32)
        raw = G.quantize_q4_0(x)
        self.assertEqual(len(raw), 18)
        d = np.frombuffer(raw[:2], dtype="<f2")[0]
        self.assertEqual(d, np.float16(0.25))
        # The reference, value by value: code = min(15, trunc(x/d + 8.5)); byte j packs value j
        # (low nibble) and value j + 16 (high nibble).
        codes = [min(15, int(float(v) * 4.0 + 8.5)) for v in x]
        packed = [codes[j] | (codes[j + 16] << 4) for j in range(16)]
        self.assertEqual(list(raw[2:]), packed)
        self.assertEqual(codes[0], 0)
        self.assertEqual(raw[2] & 0x0F, 0)  # x[0] = -2, low nibble of byte 0
        self.assertEqual(raw[2] >> 4, codes[16])
        back = G.dequantize_q4_0(raw, 32)
        self.assertEqual(back.tolist(), [(c - 8) * 0.25 for c in codes])
        self.assertEqual(G.quantize_q4_0(np.zeros(32, np.float32))[2:], bytes([0x88] * 16))

    def test_q4_0_clips_the_side_opposite_the_signed_max(self) -> None:
        # max is +2: d = -0.25, so +2 maps to code 0 and -2 would need code 16, clipped to 15.
        x = np.zeros(32, dtype=np.float32)
        x[3], x[20] = 2.0, -2.0
        raw = G.quantize_q4_0(x)
        self.assertEqual(np.frombuffer(raw[:2], dtype="<f2")[0], np.float16(-0.25))
        back = G.dequantize_q4_0(raw, 32)
        self.assertEqual(back[3], 2.0)
        self.assertEqual(back[20], -1.75)  # code 15: (15 - 8) · -0.25
        self.assertEqual(back[0], 0.0)

    def test_q4_0_round_trip_error_is_bounded_by_the_step(self) -> None:
        rng = np.random.default_rng(7)
        x = (rng.standard_normal(32 * 64) * rng.uniform(0.01, 3, 32 * 64)).astype(np.float32)
        back = G.dequantize_q4_0(G.quantize_q4_0(x), x.size)
        blocks, err = x.reshape(-1, 32), np.abs(back - x).reshape(-1, 32)
        step = np.abs(blocks).max(axis=1, keepdims=True) / 8
        # Half a step inside the codes' range, a whole step where the 16th code is clipped,
        # plus |code - 8| ≤ 8 steps of the f16 scale's rounding (2^-11 relative).
        self.assertTrue(bool((err <= step * (1 + 8 * 2.0**-11) + 1e-7).all()))
        inside = np.abs(blocks) <= step * 7.5
        half = step * (0.5 + 8 * 2.0**-11) + 1e-7
        self.assertTrue(bool((err <= half)[inside].all()))
        # q4_0 is coarser than q8_0 on the same values (what the mismatch study relies on).
        back8 = G.dequantize_q8_0(G.quantize_q8_0(x), x.size)
        self.assertGreater(np.abs(back - x).mean(), 4 * np.abs(back8 - x).mean())


class ExportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.model = build_builtin(CONFIG, 5)
        self.state = self.model.state_dict()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def export(self, file_type: str, config: ModelConfig = CONFIG, state=None) -> G.GGUFFile:
        path = os.path.join(self.tmp.name, f"{file_type}.gguf")
        G.export_gguf(path, state or self.state, config, file_type, CHAR_TOKENIZER)
        return G.GGUFFile(path)

    def test_metadata_and_tensor_names_are_llama_cpps_qwen3(self) -> None:
        g = self.export("f32")
        m = g.metadata
        expected = {
            "general.architecture": "qwen3", "general.alignment": 32, "general.file_type": 0,
            "qwen3.context_length": 128, "qwen3.embedding_length": 64, "qwen3.block_count": 2,
            "qwen3.feed_forward_length": 96, "qwen3.attention.head_count": 4,
            "qwen3.attention.head_count_kv": 2, "qwen3.attention.key_length": 16,
            "qwen3.attention.value_length": 16, "qwen3.rope.freq_base": 1e6,
            "tokenizer.ggml.model": "gpt2",
        }  # fmt: skip
        self.assertEqual({k: m[k] for k in expected}, expected)
        self.assertAlmostEqual(m["qwen3.attention.layer_norm_rms_epsilon"], 1e-6, places=12)
        names = set(g.infos)
        for i in range(2):
            for t in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm",
                      "attn_k_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"):  # fmt: skip
                self.assertIn(f"blk.{i}.{t}.weight", names)
        self.assertTrue({"token_embd.weight", "output_norm.weight", "output.weight"} <= names)
        self.assertEqual(len(names), 2 * 11 + 3)
        self.assertEqual(g.infos["blk.0.ffn_down.weight"][0], [96, 64])  # ne = [in, out]
        for _, _, offset in g.infos.values():
            self.assertEqual(offset % 32, 0)

    def test_f32_is_exact_and_no_rows_are_permuted(self) -> None:
        g = self.export("f32")
        for ours, name in G.gguf_tensor_names(CONFIG):
            self.assertTrue(torch.equal(g.tensor(name), self.state[ours]), name)

    def test_f16_and_q8_0_quantize_matrices_and_keep_norms_f32(self) -> None:
        g16, g8 = self.export("f16"), self.export("q8_0")
        self.assertEqual(g16.metadata["general.file_type"], 1)
        self.assertEqual(g8.metadata["general.file_type"], 7)
        for ours, name in G.gguf_tensor_names(CONFIG):
            t = self.state[ours]
            if t.dim() == 1:
                self.assertEqual(g16.infos[name][1], "f32")
                self.assertEqual(g8.infos[name][1], "f32")
                continue
            self.assertEqual(g16.infos[name][1], "f16")
            self.assertTrue(torch.equal(g16.tensor(name), t.half().float()), name)
            # ffn_down's rows hold 96 values: three q8_0 blocks
            self.assertEqual(g8.infos[name][1], "q8_0")
            scale = t.reshape(-1, 32).abs().max(dim=1).values / 127
            err = (g8.tensor(name) - t).reshape(-1, 32).abs().max(dim=1).values
            # half a step, plus |q| ≤ 127 steps of the f16 scale's rounding (2^-11 relative)
            bound = scale * (0.5 + 127 * 2.0**-11) + 1e-7
            self.assertTrue(bool((err <= bound).all()), name)

    def test_rows_q8_0_cannot_block_fall_back_to_f16(self) -> None:
        config = ModelConfig(**{**CONFIG.to_dict(), "d_ff": 80})  # 80 is not a multiple of 32
        state = build_builtin(config, 1).state_dict()
        g = self.export("q8_0", config, state)
        self.assertEqual(g.infos["blk.0.ffn_down.weight"][1], "f16")
        self.assertEqual(g.infos["blk.0.ffn_up.weight"][1], "q8_0")

    def test_q4_0_quantizes_matrices_keeps_norms_f32_and_falls_back_like_q8_0(self) -> None:
        g4 = self.export("q4_0")
        self.assertEqual(g4.metadata["general.file_type"], 2)
        for ours, name in G.gguf_tensor_names(CONFIG):
            t = self.state[ours]
            if t.dim() == 1:
                self.assertEqual(g4.infos[name][1], "f32")
                continue
            self.assertEqual(g4.infos[name][1], "q4_0")
            step = t.reshape(-1, 32).abs().max(dim=1).values / 8
            err = (g4.tensor(name) - t).reshape(-1, 32).abs().max(dim=1).values
            self.assertTrue(bool((err <= step * (1 + 8 * 2.0**-11) + 1e-7).all()), name)
        config = ModelConfig(**{**CONFIG.to_dict(), "d_ff": 80})
        g = self.export("q4_0", config, build_builtin(config, 1).state_dict())
        self.assertEqual(g.infos["blk.0.ffn_down.weight"][1], "f16")
        self.assertEqual(g.infos["blk.0.ffn_up.weight"][1], "q4_0")

    def test_a_tied_model_writes_no_output_tensor(self) -> None:
        config = ModelConfig(**{**CONFIG.to_dict(), "tie_embeddings": True})
        g = self.export("f16", config, build_builtin(config, 2).state_dict())
        self.assertNotIn("output.weight", g.infos)

    def test_the_char_vocab_becomes_byte_level_with_typed_specials(self) -> None:
        m = self.export("f32").metadata
        with open(os.path.join(CHAR_TOKENIZER, "tokenizer.json")) as f:
            vocab = json.load(f)["model"]["vocab"]
        tokens, types = m["tokenizer.ggml.tokens"], m["tokenizer.ggml.token_type"]
        self.assertEqual(len(tokens), 107)
        self.assertEqual(tokens[vocab[" "]], "\u0120")  # GPT-2's byte-level space
        self.assertEqual(tokens[vocab["\n"]], "\u010a")
        self.assertEqual(tokens[vocab["a"]], "a")
        self.assertEqual((tokens[2], types[2]), ("<|im_end|>", G.CONTROL))
        self.assertEqual((tokens[3], types[3]), ("<think>", G.USER_DEFINED))
        self.assertEqual(types[vocab["a"]], G.NORMAL)
        self.assertEqual(m["tokenizer.ggml.eos_token_id"], 2)
        self.assertEqual(m["tokenizer.ggml.merges"], [])
        self.assertFalse(m["tokenizer.ggml.add_bos_token"])
        self.assertIn("<|im_start|>", m["tokenizer.chat_template"])

    def test_a_vocab_larger_than_the_tokenizer_is_padded(self) -> None:
        config = ModelConfig(**{**CONFIG.to_dict(), "vocab_size": 128})
        m = self.export("f32", config, build_builtin(config, 2).state_dict()).metadata
        self.assertEqual(m["tokenizer.ggml.tokens"][120], "[PAD120]")
        self.assertEqual(m["tokenizer.ggml.token_type"][120], G.UNUSED)

    def test_bad_input_is_refused_naming_the_field(self) -> None:
        path = os.path.join(self.tmp.name, "x.gguf")
        with self.assertRaisesRegex(G.GGUFError, "type must be one of"):
            G.export_gguf(path, self.state, CONFIG, "q3_k", CHAR_TOKENIZER)
        small = ModelConfig(**{**CONFIG.to_dict(), "vocab_size": 50})
        with self.assertRaisesRegex(G.GGUFError, "does not fit the model's vocab_size 50"):
            G.export_gguf(path, build_builtin(small, 0).state_dict(), small, "f32", CHAR_TOKENIZER)
        with self.assertRaisesRegex(G.GGUFError, "tokenizer: cannot read"):
            G.export_gguf(path, self.state, CONFIG, "f32", self.tmp.name)
        state = dict(self.state)
        del state["layers.1.mlp.up_proj.weight"]
        with self.assertRaisesRegex(G.GGUFError, "layers.1.mlp.up_proj.weight"):
            G.export_gguf(path, state, CONFIG, "f32", CHAR_TOKENIZER)
        self.assertFalse(os.path.exists(path))
        with open(path, "wb") as f:
            f.write(b"GGML" + b"\0" * 20)
        with self.assertRaisesRegex(G.GGUFError, "bad magic"):
            G.GGUFFile(path)


if __name__ == "__main__":
    unittest.main()


class ExportCliTest(unittest.TestCase):
    """`python3 -m reins_worker.export` on a worker checkpoint (POST /save's format)."""

    def test_a_worker_checkpoint_exports_to_both_formats_losslessly(self) -> None:
        from reins_worker import hf_layout
        from reins_worker.engine import Engine
        from reins_worker.export import ExportError, run
        from reins_worker.validate import parse_init

        engine = Engine()
        engine.init(parse_init({"model": {"kind": "builtin", "config": CONFIG.to_dict()}}))
        with tempfile.TemporaryDirectory() as d:
            checkpoint = os.path.join(d, "policy.pt")
            engine.save(checkpoint)
            hf_dir, gguf = os.path.join(d, "hf"), os.path.join(d, "p.gguf")
            out = run(["--checkpoint", checkpoint, "--hf", hf_dir, "--gguf", gguf,
                       "--type", "f32", "--tokenizer", CHAR_TOKENIZER])  # fmt: skip
            self.assertEqual(out["hf"]["dtype"], "float32")
            self.assertIn("tokenizer.json", out["hf"]["files"])
            assert engine.model is not None
            state = engine.model.state_dict()
            back, _ = hf_layout.load_hf_dir(hf_dir)
            for name, t in back.state_dict().items():
                self.assertTrue(torch.equal(t, state[name]), name)
            g = G.GGUFFile(gguf)
            k_proj = state["layers.1.attn.k_proj.weight"]
            self.assertTrue(torch.equal(g.tensor("blk.1.attn_k.weight"), k_proj))
            # An HF directory carries its tokenizer: no --tokenizer needed.
            run(["--checkpoint", hf_dir, "--gguf", gguf, "--type", "q8_0"])
            self.assertEqual(G.GGUFFile(gguf).metadata["general.file_type"], 7)
            with self.assertRaisesRegex(ExportError, "^--tokenizer: GGUF needs"):
                run(["--checkpoint", checkpoint, "--gguf", gguf])
            with self.assertRaisesRegex(ExportError, "^--gguf: give --gguf"):
                run(["--checkpoint", checkpoint])
            with open(os.path.join(d, "junk.pt"), "wb") as f:
                f.write(b"not a torch archive")
            with self.assertRaisesRegex(ExportError, "^--checkpoint: cannot read"):
                run(["--checkpoint", os.path.join(d, "junk.pt"), "--hf", hf_dir])
