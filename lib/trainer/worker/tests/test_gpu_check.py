"""The GPU check's code path on the CPU (`--tiny`): every section runs and reports its figures,
nothing is left as an error, and no GPU-only figure (MFU) is made up on the CPU."""

import json
import os
import tempfile
import unittest

from reins_worker.tools.gpu_check import main


class GpuCheckTinyTest(unittest.TestCase):
    def test_tiny_run_writes_every_section(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "check.json")
            main(["--tiny", "--out", out])
            with open(out) as f:
                report = json.load(f)
        self.assertTrue(report["tiny"])
        self.assertEqual(report["device"], "cpu")
        self.assertIsNone(report["peak_flops"])
        sections = [report["builtin"], report["data_parallel"]]
        hf = report["hf_qwen3"]
        if "skipped" in hf:
            self.assertIn("transformers", hf["skipped"])  # the one section allowed to skip here
        else:
            sections.append(hf)
            self.assertEqual(hf["architecture"], "Qwen3ForCausalLM")
        for section in sections:
            errors = [k for k in section if k.endswith("error")]
            self.assertEqual(errors, [], section)
        for section in sections[:1] + sections[2:]:
            self.assertGreater(section["train_tok_per_s"], 0)
            self.assertIsNone(section["mfu"], "no MFU without a GPU peak")
            self.assertEqual(section["tokens_per_micro_batch"], 128)
            self.assertGreater(section["generate_tok_per_s"], 0)
            self.assertGreater(section["alignment_tokens"], 0)
            # fp32 on the CPU: sampling and training score the same tokens alike.
            self.assertGreater(section["logprob_pearson"], 0.999)
        dp = report["data_parallel"]
        self.assertEqual(dp["ranks"], 2)
        self.assertTrue(dp["ranks_hold_same_weights"])
        self.assertGreater(dp["train_tok_per_s"], 0)


if __name__ == "__main__":
    unittest.main()
