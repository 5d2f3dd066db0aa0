"""The Hugging Face layout: safetensors by the spec, bit-exact round trips, HF Qwen3's math."""

import json
import math
import os
import struct
import tempfile
import unittest

import torch

from reins_worker import hf_layout
from reins_worker import safetensors_io as st
from reins_worker.engine import Engine
from reins_worker.model import ModelConfig, build_builtin
from reins_worker.validate import RequestError, parse_init

CHAR_TOKENIZER = os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "..", "data", "tokenizers", "char"
)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def tiny(tied: bool = True, head_dim=None) -> ModelConfig:
    return ModelConfig(
        vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
        max_seq_len=64, tie_embeddings=tied, rope_theta=500.0, norm_eps=1e-5, head_dim=head_dim,
    )  # fmt: skip


def perturbed(config: ModelConfig, seed: int = 3):
    """A model whose norms are not all ones, so a swapped norm would show in the logits."""
    model = build_builtin(config, seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def hf_qwen3_reference(tensors, cfg, tokens):
    """Qwen3ForCausalLM's forward as transformers' modeling_qwen3.py writes it, over HF-named
    tensors: q/k RMSNorm per head before RoPE, rotate_half over split halves, repeat_kv, eager
    softmax attention with a causal mask. Written independently of reins_worker.model."""
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps = cfg["rms_norm_eps"]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2 :], x[..., : hd // 2]), dim=-1)

    t = tokens.shape[0]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    freqs = torch.outer(torch.arange(t).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    h = tensors["model.embed_tokens.weight"][tokens]
    causal = torch.full((t, t), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms(h, tensors[p + "input_layernorm.weight"])
        q = (x @ tensors[p + "self_attn.q_proj.weight"].T).view(t, nh, hd)
        k = (x @ tensors[p + "self_attn.k_proj.weight"].T).view(t, nkv, hd)
        v = (x @ tensors[p + "self_attn.v_proj.weight"].T).view(t, nkv, hd)
        q = rms(q, tensors[p + "self_attn.q_norm.weight"]).transpose(0, 1)
        k = rms(k, tensors[p + "self_attn.k_norm.weight"]).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.transpose(0, 1).repeat_interleave(nh // nkv, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + causal, dim=-1)
        out = (att @ v).transpose(0, 1).reshape(t, nh * hd)
        h = h + out @ tensors[p + "self_attn.o_proj.weight"].T
        x = rms(h, tensors[p + "post_attention_layernorm.weight"])
        gate = x @ tensors[p + "mlp.gate_proj.weight"].T
        up = x @ tensors[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ tensors[p + "mlp.down_proj.weight"].T
    h = rms(h, tensors["model.norm.weight"])
    head = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"])
    return h @ head.T


class SafetensorsTest(unittest.TestCase):
    def test_a_file_written_by_hand_per_the_spec_parses(self) -> None:
        # Two tensors: "a" F32 [2] = [1.5, -2.0] and "b" F16 [1, 2] = [0.5, 3.0].
        data = struct.pack("<2f", 1.5, -2.0) + struct.pack("<2e", 0.5, 3.0)
        header = json.dumps({
            "__metadata__": {"format": "pt"},
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F16", "shape": [1, 2], "data_offsets": [8, 12]},
        }).encode()  # fmt: skip
        raw = struct.pack("<Q", len(header)) + header + data
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.safetensors")
            with open(path, "wb") as f:
                f.write(raw)
            out = st.load(path)
            _, metadata, _ = st.read_header(path)
        self.assertEqual(out["a"].tolist(), [1.5, -2.0])
        self.assertEqual(out["a"].dtype, torch.float32)
        self.assertEqual(out["b"].tolist(), [[0.5, 3.0]])
        self.assertEqual(out["b"].dtype, torch.float16)
        self.assertEqual(metadata, {"format": "pt"})

    def test_every_float_dtype_round_trips_bit_for_bit(self) -> None:
        g = torch.Generator().manual_seed(0)
        tensors = {
            f"t.{dtype}": torch.randn(3, 5, generator=g).to(dtype)
            for dtype in (torch.float32, torch.float16, torch.bfloat16)
        }
        tensors["scalar"] = torch.tensor(2.25)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.safetensors")
            st.save(path, tensors)
            back = st.load(path)
            self.assertEqual(read_bytes(path), st.encode(tensors))
        for name, t in tensors.items():
            self.assertEqual(back[name].dtype, t.dtype)
            self.assertTrue(torch.equal(back[name].view(-1), t.view(-1)), name)
            self.assertEqual(back[name].shape, t.shape)

    def test_malformed_files_are_refused_naming_the_tensor(self) -> None:
        def write(d, header, data=b""):
            raw = json.dumps(header).encode()
            path = os.path.join(d, "bad.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", len(raw)) + raw + data)
            return path

        cases = [
            ({"w": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "unknown dtype"),
            ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "needs 8"),
            ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "hole"),
            (
                {
                    "v": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                },
                b"\0" * 8,
                "overlaps",
            ),
            ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"", "cover 4 bytes"),
        ]
        with tempfile.TemporaryDirectory() as d:
            for header, data, message in cases:
                with self.assertRaisesRegex(st.SafetensorsError, message):
                    st.load(write(d, header, data))
            path = os.path.join(d, "short.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", 10_000) + b"{}")
            with self.assertRaisesRegex(st.SafetensorsError, "overruns the file"):
                st.load(path)


class HFLayoutTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tokens = torch.tensor([[3, 9, 1, 22, 7, 5, 31, 2, 17, 39, 0, 4]])
        self.positions = torch.arange(12)[None]

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def logits(self, model):
        with torch.no_grad():
            return model(self.tokens, self.positions, None, True)

    def test_a_checkpoint_round_trips_bit_for_bit(self) -> None:
        for tied in (True, False):
            config = tiny(tied)
            model = perturbed(config)
            out = os.path.join(self.dir, f"tied-{tied}")
            files = hf_layout.save_hf_dir(
                out, model.state_dict(), config, "float32", CHAR_TOKENIZER
            )
            self.assertIn("tokenizer.json", files)
            back, back_config = hf_layout.load_hf_dir(out)
            self.assertEqual(back_config, config)
            state, back_state = model.state_dict(), back.state_dict()
            self.assertEqual(sorted(state), sorted(back_state))
            for name in state:
                self.assertTrue(torch.equal(state[name], back_state[name]), name)
            self.assertTrue(torch.equal(self.logits(model), self.logits(back)))
            names = set(st.load_dir(out))
            self.assertEqual("lm_head.weight" in names, not tied)

    def test_config_json_is_qwen3s(self) -> None:
        config = tiny(head_dim=16)  # head_dim != d_model / n_heads, as in Qwen3-0.6B
        hf_layout.save_hf_dir(self.dir, perturbed(config).state_dict(), config, "bfloat16")
        cfg = read_json(os.path.join(self.dir, "config.json"))
        self.assertEqual(cfg["architectures"], ["Qwen3ForCausalLM"])
        expected = {
            "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 48,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 500.0, "vocab_size": 40,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "max_position_embeddings": 64,
        }  # fmt: skip
        self.assertEqual({k: cfg[k] for k in expected}, expected)
        header, _, _ = st.read_header(os.path.join(self.dir, "model.safetensors"))
        self.assertEqual(header["model.layers.1.self_attn.q_proj.weight"]["shape"], [64, 32])
        self.assertEqual(header["model.layers.0.self_attn.k_norm.weight"]["dtype"], "BF16")

    def test_the_decoder_computes_what_hf_qwen3_computes(self) -> None:
        for config in (tiny(True), tiny(False, head_dim=16)):
            model = perturbed(config)
            hf_layout.save_hf_dir(self.dir, model.state_dict(), config, "float32")
            tensors = st.load_dir(self.dir)
            cfg = read_json(os.path.join(self.dir, "config.json"))
            ref = hf_qwen3_reference(tensors, cfg, self.tokens[0])
            diff = (self.logits(model)[0] - ref).abs().max().item()
            self.assertLess(diff, 1e-5)

    def test_sharded_checkpoints_load(self) -> None:
        config = tiny(False)
        model = perturbed(config)
        files = hf_layout.save_hf_dir(
            self.dir, model.state_dict(), config, "float32", max_shard_bytes=8_000
        )
        self.assertIn("model.safetensors.index.json", files)
        self.assertGreater(sum(f.endswith(".safetensors") for f in files), 2)
        back, _ = hf_layout.load_hf_dir(self.dir)
        self.assertTrue(torch.equal(self.logits(model), self.logits(back)))

    def write_downloaded_qwen3(self) -> ModelConfig:
        """A directory shaped like a Hub download: transformers 5 style rope_parameters,
        bf16 weights, a tied lm_head stored anyway, an old inv_freq buffer, sharded."""
        config = tiny(True, head_dim=16)
        model = perturbed(config)
        tensors = hf_layout.to_hf_tensors(model.state_dict(), config, torch.bfloat16)
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
        st.save_dir(self.dir, tensors, max_shard_bytes=20_000)
        cfg = hf_layout.hf_config(config, "bfloat16")
        del cfg["rope_theta"], cfg["rope_scaling"]
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 500.0}
        cfg.update(bos_token_id=0, eos_token_id=2, transformers_version="5.0.0")
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(cfg, f)
        return config

    def test_a_downloaded_qwen3_directory_loads_into_the_worker(self) -> None:
        config = self.write_downloaded_qwen3()
        for kind in ("checkpoint", "hf"):
            engine = Engine()
            state = engine.init(parse_init({"model": {"kind": kind, "path": self.dir}}))
            self.assertEqual(state["model_kind"], "builtin")
            self.assertEqual(state["config"]["head_dim"], 16)
            self.assertEqual(state["config"]["rope_theta"], 500.0)
            self.assertEqual(ModelConfig(**state["config"]), config)
            out = engine.logprobs([[1, 2, 3, 4]], 1.0)
            self.assertTrue(all(math.isfinite(x) for x in out["logprobs"][0]))

    def test_what_the_decoder_cannot_run_is_refused_naming_the_field(self) -> None:
        config = tiny()
        hf_layout.save_hf_dir(self.dir, perturbed(config).state_dict(), config, "float32")
        path = os.path.join(self.dir, "config.json")
        good = read_json(path)
        cases = [
            ({"model_type": "llama"}, "model_type"),
            ({"attention_bias": True}, "attention_bias"),
            ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
            ({"num_key_value_heads": 3}, "num_key_value_heads"),
            ({"hidden_size": 0}, "hidden_size"),
            ({"num_hidden_layers": 3}, "missing tensor 'model.layers.2"),
            ({"tie_word_embeddings": False}, "missing tensor 'lm_head.weight'"),
            ({"intermediate_size": 50}, "do not fit config.json"),
        ]
        for change, message in cases:
            with open(path, "w") as f:
                json.dump({**good, **change}, f)
            with self.assertRaisesRegex(hf_layout.LayoutError, message):
                hf_layout.load_hf_dir(self.dir)
            with self.assertRaises(RequestError) as caught:
                Engine().build(parse_init({"model": {"kind": "checkpoint", "path": self.dir}}))
            self.assertEqual(caught.exception.status, 400)
            self.assertEqual(caught.exception.field, "model.path")


if __name__ == "__main__":
    unittest.main()
