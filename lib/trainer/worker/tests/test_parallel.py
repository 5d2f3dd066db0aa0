"""Data parallelism: a worker with 2 CPU ranks (gloo) takes the same optimizer step as one
process given the same rows, for PPO (decoupled, with π_prox sent back), GSPO (per-call sequence
ids), CE, and tree (shared-prefix) and packed rows; a rank that dies or hangs fails the call
with a clear error instead of hanging."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

import torch

from reins_worker.engine import Engine
from reins_worker.validate import parse_forward_backward, parse_init
from tests.tiny import tiny_config

CONFIG = tiny_config(40)
INIT = {
    "model": {"kind": "builtin", "config": CONFIG, "seed": 3},
    "optimizer": {"lr": 1e-3, "grad_clip": 1.0, "weight_decay": 0.01},
    "device": "cpu",
}
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Worker:
    """A worker process (its ranks included) spoken to over HTTP."""

    def __init__(self, args: List[str], env: Optional[Dict[str, str]] = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "reins_worker", "--threads", "1", *args],
            cwd=PACKAGE_DIR,
            env=dict(os.environ, **(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"worker exited before it was ready: {self.proc.wait()}")
            if line.startswith("REINS_WORKER_READY "):
                info = json.loads(line.split(" ", 1)[1])
                break
        self.url = f"http://127.0.0.1:{info['port']}"

    def call(self, path: str, body: Any = None, timeout: float = 120) -> Tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as res:
                return res.status, json.loads(res.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ok(self, path: str, body: Any = None) -> Any:
        status, out = self.call(path, body)
        if status != 200:
            raise AssertionError(f"{path}: HTTP {status}: {out}")
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def row(tokens: List[int], adv: float, weight: float, shift: float = 0.0, **extra: Any):
    n = len(tokens)
    mask = [0, 0] + [1] * (n - 2)
    out = {
        "tokens": tokens,
        "loss_mask": mask,
        "advantages": [adv] * n,
        "loss_weights": [m * weight for m in mask],
        "rollout_logprobs": [-math.log(40) + shift * m for m in mask],
    }
    out.update(extra)
    return out


def batch() -> List[Dict[str, Any]]:
    """Linear rows of several lengths, a packed row (two segments) and a tree row (one shared
    prompt, two responses), as the loop's packers make them; weights normalised over all."""
    g = torch.Generator().manual_seed(0)

    def toks(n: int) -> List[int]:
        return torch.randint(1, 40, (n,), generator=g).tolist()

    rows = [
        row(toks(20), 1.0, 1 / 90, 0.2),
        row(toks(9), -1.0, 1 / 90),
        row(toks(31), 0.5, 1 / 90, -0.1),
        row(toks(6), -0.5, 1 / 90, 0.3),
    ]
    packed = row(toks(16), 1.0, 1 / 90, 0.1, segment_starts=[0, 7])
    packed["loss_mask"][7] = 0  # the second segment's first token has no predecessor
    packed["loss_mask"][8] = 0
    rows.append(packed)
    # Tree: prompt 0..4, response A 5..8 (parent chain from 4), response B 9..12 (from 4).
    parent = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 4, 9, 10, 11]
    tree = row(toks(13), -1.0, 1 / 90, 0.0, parent=parent)
    tree["loss_mask"] = [0] * 5 + [1] * 8
    tree["loss_weights"] = [m / 90 for m in tree["loss_mask"]]
    tree["advantages"] = [0.0] * 5 + [1.0] * 4 + [-1.0] * 4
    rows.append(tree)
    return rows


def with_call_ids(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """GSPO per call: every row's trained tokens split into two calls."""
    out = []
    for r in rows:
        n = len(r["tokens"])
        r = dict(r, sequence_ids=[0 if t < n // 2 else 1 for t in range(n)])
        out.append(r)
    return out


class Reference:
    """One process, one forward_backward per row (how the loop calls a single-rank worker)."""

    def __init__(self) -> None:
        self.engine = Engine()
        self.engine.init(parse_init(INIT))

    def forward_backward(self, rows, loss, want_lp=False, proximal=None):
        outs = []
        for i, r in enumerate(rows):
            body = {"rows": [r], "loss": loss, "return_logprobs": want_lp}
            if proximal is not None:
                body["proximal_logprobs"] = [proximal[i]]
            parsed, spec, want = parse_forward_backward(body, 40, 64)
            outs.append(self.engine.forward_backward(parsed, spec, want))
        return outs

    def params(self) -> Dict[str, torch.Tensor]:
        assert self.engine.model is not None
        return {k: v.detach().clone() for k, v in self.engine.model.state_dict().items()}


def max_diff(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


class DataParallelTest(unittest.TestCase):
    worker: Worker

    @classmethod
    def setUpClass(cls) -> None:
        torch.set_num_threads(1)
        cls.worker = Worker(["--ranks", "2", "--collective-timeout-s", "60"])
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.worker.close()
        cls.tmp.cleanup()

    def dp_params(self) -> Dict[str, torch.Tensor]:
        path = os.path.join(self.tmp.name, "dp.pt")
        self.worker.ok("/save", {"path": path})
        return torch.load(path)["model"]

    def assert_ranks_agree(self) -> None:
        state = self.worker.ok("/state")
        self.assertEqual(state["world_size"], 2)
        sums = {r["rank"]: (r["param_checksum"], r["optimizer_checksum"]) for r in state["ranks"]}
        self.assertEqual(sums[0], sums[1], "every rank holds the same weights and AdamW state")

    def run_case(self, rows, loss, epochs: int = 1) -> None:
        ref = Reference()
        self.worker.ok("/init", INIT)
        self.assertLess(max_diff(ref.params(), self.dp_params()), 1e-12, "same initial weights")
        assign = [i % 2 for i in range(len(rows))]
        recompute = loss.get("old_logprobs") == "recompute"
        proximal_ref = proximal_dp = None
        for epoch in range(epochs):
            first = epoch == 0
            ref_out = ref.forward_backward(rows, loss, first, proximal_ref)
            body: Dict[str, Any] = {
                "rows": rows,
                "loss": loss,
                "return_logprobs": first,
                "rank_of_row": assign,
            }
            if proximal_dp is not None:
                body["proximal_logprobs"] = proximal_dp
            dp_out = self.worker.ok("/forward_backward", body)
            self.assertAlmostEqual(dp_out["loss"], sum(o["loss"] for o in ref_out), places=6)
            tokens = sum(o["metrics"]["tokens"] for o in ref_out)
            self.assertEqual(dp_out["metrics"]["tokens"], tokens)
            clip = sum(o["metrics"]["clip_fraction"] * o["metrics"]["tokens"] for o in ref_out)
            self.assertAlmostEqual(dp_out["metrics"]["clip_fraction"], clip / tokens, places=6)
            self.assertEqual(dp_out["rank_tokens"], [
                sum(len(r["tokens"]) for i, r in enumerate(rows) if assign[i] == k)
                for k in range(2)
            ])
            if first:
                lps = [o["logprobs"][0] for o in ref_out]
                for a, b in zip(lps, dp_out["logprobs"]):
                    self.assertLess(max(abs(x - y) for x, y in zip(a, b)), 1e-6)
                if recompute:
                    proximal_ref, proximal_dp = lps, dp_out["logprobs"]
            ref_step = ref.engine.optim_step()
            dp_step = self.worker.ok("/optim_step", {})
            self.assertAlmostEqual(dp_step["grad_norm"], ref_step["grad_norm"], places=5)
            self.assertEqual(dp_step["policy_version"], ref_step["policy_version"])
        diff = max_diff(ref.params(), self.dp_params())
        self.assertLessEqual(diff, 1e-6, f"2 ranks vs 1: max |Δθ| = {diff}")
        self.assertGreater(max_diff(ref.params(), Reference().params()), 1e-4, "a step moved θ")
        self.assert_ranks_agree()

    def test_ppo_decoupled_two_epochs_match_one_process(self) -> None:
        loss = {"kind": "ppo", "old_logprobs": "recompute", "tis_cap": 2.0, "clip_high": 0.28}
        self.run_case(batch(), loss, epochs=2)

    def test_gspo_per_call_sequences_match_one_process(self) -> None:
        loss = {"kind": "gspo", "gspo_sequence": "call", "kl_coef": 0.01}
        self.run_case(with_call_ids(batch()), loss)

    def test_ce_matches_one_process(self) -> None:
        self.run_case(batch(), {"kind": "ce"})

    def test_rows_without_a_plan_are_spread_and_bad_plans_refused(self) -> None:
        self.worker.ok("/init", INIT)
        out = self.worker.ok("/forward_backward", {"rows": batch(), "loss": {"kind": "ce"}})
        self.assertTrue(all(t > 0 for t in out["rank_tokens"]), out["rank_tokens"])
        status, err = self.worker.call(
            "/forward_backward",
            {"rows": batch()[:2], "loss": {"kind": "ce"}, "rank_of_row": [0, 2]},
        )
        self.assertEqual(status, 400)
        self.assertEqual(err["error"]["field"], "rank_of_row[1]")
        # A non-finite loss on one rank leaves every rank's gradients as they were.
        self.worker.ok("/zero_grad", {})
        bad = batch()[:2]
        bad[1]["advantages"][5] = 1e308
        bad[1]["loss_weights"][5] = 1e308
        status, err = self.worker.call(
            "/forward_backward", {"rows": bad, "loss": {"kind": "ppo"}, "rank_of_row": [0, 1]}
        )
        self.assertEqual(status, 422, err)
        self.assertEqual(err["error"]["field"], "rows[1]")
        self.assertFalse(self.worker.ok("/state")["has_grad"])
        self.assertEqual(max(abs(g) for g in self.worker.ok("/debug/gradients", {})["gradient"]), 0)

    def test_load_restores_every_rank(self) -> None:
        self.worker.ok("/init", INIT)
        rows = batch()
        self.worker.ok("/forward_backward", {"rows": rows, "loss": {"kind": "ce"}})
        self.worker.ok("/optim_step", {})
        path = os.path.join(self.tmp.name, "step1.pt")
        self.worker.ok("/save", {"path": path})
        saved = self.worker.ok("/state")
        self.worker.ok("/forward_backward", {"rows": rows, "loss": {"kind": "ce"}})
        self.worker.ok("/optim_step", {})
        self.assertNotEqual(self.worker.ok("/state")["param_checksum"], saved["param_checksum"])
        self.worker.ok("/load", {"path": path})
        state = self.worker.ok("/state")
        first = state["ranks"][0]
        self.assertEqual(first, dict(state["ranks"][1], rank=0, pid=first["pid"]))
        for r in state["ranks"]:
            self.assertEqual(r["param_checksum"], saved["param_checksum"])
            # (AdamW's state dict comes back in another key order: the sum's last bits move)
            self.assertAlmostEqual(r["optimizer_checksum"], saved["optimizer_checksum"], places=9)
            self.assertEqual(r["policy_version"], 1)


class RankFailureTest(unittest.TestCase):
    def fb(self, worker: Worker) -> Tuple[int, Any, float]:
        t0 = time.monotonic()
        status, out = worker.call(
            "/forward_backward",
            {"rows": batch(), "loss": {"kind": "ce"}, "rank_of_row": [0, 1] * 3},
            timeout=90,
        )
        return status, out, time.monotonic() - t0

    def setUp(self) -> None:
        self.pid: Optional[int] = None

    def fail_rank_1(self, worker: Worker, sig: signal.Signals) -> Tuple[Any, float]:
        """Initialises the 2-rank `worker`, sends `sig` to rank 1 (its pid kept in `self.pid`),
        then a forward_backward call must fail with 503 rank_failed: (its error, seconds)."""
        worker.ok("/init", INIT)
        pid = worker.ok("/state")["ranks"][1]["pid"]
        self.pid = pid
        os.kill(pid, sig)
        status, out, took = self.fb(worker)
        self.assertEqual(status, 503, out)
        self.assertEqual(out["error"]["code"], "rank_failed")
        return out, took

    def test_a_killed_rank_fails_the_call_and_the_health_check(self) -> None:
        worker = Worker(["--ranks", "2", "--collective-timeout-s", "60"])
        try:
            out, took = self.fail_rank_1(worker, signal.SIGKILL)
            self.assertIn("rank 1", out["error"]["message"])
            self.assertIn("SIGKILL", out["error"]["message"])
            self.assertLess(took, 30, "failed fast, well inside the collective timeout")
            status, out = worker.call("/health")
            self.assertEqual(status, 503)
            self.assertEqual(worker.call("/optim_step", {})[0], 503)
        finally:
            worker.close()

    def test_a_hung_rank_times_out_the_collective(self) -> None:
        worker = Worker(["--ranks", "2", "--collective-timeout-s", "8"])
        try:
            out, took = self.fail_rank_1(worker, signal.SIGSTOP)
            self.assertIn("forward_backward", out["error"]["message"])
            self.assertLess(took, 60)
        finally:
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGCONT)
            worker.close()

    def test_torchrun_style_ranks_fail_the_call_when_one_dies(self) -> None:
        """Ranks started by an outside launcher (the torchrun environment): no child process to
        watch, so the dead rank shows through the command channel and the collectives."""
        port = str(_free_port())
        base = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        other = subprocess.Popen(
            [sys.executable, "-u", "-m", "reins_worker", "--threads", "1"],
            cwd=PACKAGE_DIR,
            env=dict(os.environ, **base, RANK="1", LOCAL_RANK="1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        worker = Worker(
            ["--collective-timeout-s", "30"], env=dict(base, RANK="0", LOCAL_RANK="0")
        )
        try:
            worker.ok("/init", INIT)
            self.assertEqual(worker.ok("/health")["world_size"], 2)
            status, _, _ = self.fb(worker)
            self.assertEqual(status, 200)
            other.kill()
            other.wait()
            status, out, took = self.fb(worker)
            self.assertEqual(status, 503, out)
            self.assertIn("rank 1 closed its connection", out["error"]["message"])
            self.assertLess(took, 30)
        finally:
            other.kill()
            other.wait()
            worker.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    unittest.main()
