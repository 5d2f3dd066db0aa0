"""Rank 0 of a data-parallel worker, and the loop every other rank runs.

Rank 0 serves the HTTP API. A training call (`init`, `load`, `forward_backward`, `optim_step`,
`zero_grad`) goes to every rank as a command; each rank runs its part, they agree and all-reduce
through `torch.distributed`, and each answers rank 0, which answers the client. `save`,
`logprobs` and generation run on rank 0 alone: every rank holds the same weights, and one
serving rank keeps "one policy version per response" a matter of one process.

A rank that dies or hangs fails the call in progress (and every later training call) with
`503 rank_failed` naming the rank, after at most the collective timeout; the worker then has to
be restarted (a run's `resume` restores the last checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from .dist_env import Channel, CommError, Groups
from .engine import Engine, not_initialized
from .rank_ops import (
    RankOps,
    loss_from_json,
    lpt_assign,
    merge_metrics,
    row_from_json,
    row_to_json,
)
from .validate import InitSpec, LossSpec, OptimizerSpec, RequestError, Row, bad

T = TypeVar("T")


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _error_json(e: RequestError) -> Dict[str, Any]:
    return {"status": e.status, "code": e.code, "message": e.message, "field": e.field}


class Coordinator:
    def __init__(
        self,
        engine: Engine,
        groups: Groups,
        channels: List[Channel],
        children: List[subprocess.Popen],
    ) -> None:
        self.engine = engine
        self.ops = RankOps(engine, groups)
        self.channels = channels
        self.children = children  # rank r is children[r - 1] under the worker's own launcher
        self.world_size = groups.env.world_size
        self.timeout_s = groups.env.timeout_s
        self.lock = threading.RLock()
        self._error_lock = threading.Lock()
        self.error: Optional[RequestError] = None
        if children:
            threading.Thread(target=self._monitor, name="rank-monitor", daemon=True).start()

    # -- failures --------------------------------------------------------------------------------

    def _dead(self, wait_s: float = 0.0) -> Optional[str]:
        """Names a rank that is gone: an exited child (own launcher), or a closed channel."""
        deadline = time.monotonic() + wait_s
        while True:
            for r, child in enumerate(self.children, start=1):
                code = child.poll()
                if code is not None:
                    return f"rank {r} (pid {child.pid}) {_exit_text(code)}"
            if not self.children:
                for channel in self.channels:
                    if not channel.alive():
                        return f"rank {channel.peer} closed its connection (its process exited)"
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def _monitor(self) -> None:
        while self.error is None:
            dead = self._dead()
            if dead:
                self._broken(dead)
                return
            time.sleep(0.5)

    def _broken(self, reason: str) -> RequestError:
        with self._error_lock:
            if self.error is None:
                self.error = RequestError(
                    503,
                    "rank_failed",
                    f"data-parallel training failed: {reason}. This worker cannot train any "
                    "more: restart it (a run's resume restores the last checkpoint)",
                )
                for child in self.children:
                    if child.poll() is None:
                        child.kill()
                for channel in self.channels:
                    channel.close()
            return self.error

    def check(self) -> None:
        if self.error is not None:
            raise self.error
        dead = self._dead()
        if dead:
            raise self._broken(dead)

    def health(self) -> Dict[str, Any]:
        return {"world_size": self.world_size}

    # -- one command on every rank ---------------------------------------------------------------

    def _run(
        self,
        what: str,
        message: Callable[[int], Dict[str, Any]],
        local: Callable[[], T],
    ) -> Tuple[T, List[Any]]:
        """Sends each rank its command, runs rank 0's part, collects every answer. Errors that
        every rank agreed on come back as the first rank's own error."""
        self.check()
        local_error: Optional[RequestError] = None
        result: Any = None
        try:
            for channel in self.channels:
                channel.send(message(channel.peer), timeout=self.timeout_s)
            try:
                result = local()
            except RequestError as e:
                local_error = e
            replies = [channel.recv(timeout=self.timeout_s) for channel in self.channels]
        except CommError as e:
            dead = self._dead(wait_s=2.0)
            raise self._broken(f"{what}: {dead or e}") from e
        errors = ([local_error] if local_error else []) + [
            RequestError(r["error"]["status"], r["error"]["code"], r["error"]["message"],
                         r["error"].get("field"))
            for r in replies
            if not r["ok"]
        ]
        if errors:
            own = [e for e in errors if e.code != "failed_elsewhere"]
            raise (own or errors)[0]
        return result, [r["result"] for r in replies]

    # -- the training API (as Engine's) ----------------------------------------------------------

    def init(self, spec: InitSpec) -> Dict[str, Any]:
        if spec.reference_path is not None:
            raise bad("reference_path", "not supported by a data-parallel worker yet")
        device = self.ops.device_of(self.engine.resolve_device(spec.device).type)
        built = self.engine.build(spec)  # bad paths and configs fail here, before any rank
        msg = self.ops.init_message(built, device.type, spec.dtype, spec.optimizer)

        def local() -> None:
            if self.ops.agree(False, "init agreement"):
                raise RequestError(422, "failed_elsewhere", "another rank failed to build")
            with self.engine.lock:
                self.engine.install(built, device, spec.dtype, spec.optimizer)
                self.ops.broadcast_model()

        with self.engine.weights_change(), self.lock:
            self._run("init", lambda _r: msg, local)
        return self.state()

    def save(self, path: str) -> Dict[str, Any]:
        with self.lock:
            return self.engine.save(path)  # every rank holds these weights

    def load(self, path: str) -> Dict[str, Any]:
        with self.engine.weights_change(), self.lock:
            self.check()
            out = self.engine.load(path)  # a bad file fails here, before any rank

            def local() -> None:
                with self.engine.lock:
                    self.ops.broadcast_model()
                    self.ops.broadcast_optimizer()

            msg = {
                "op": "load_state",
                "policy_version": self.engine.policy_version,
                "optimizer_steps": self.engine.optimizer_steps,
            }
            self._run("load", lambda _r: msg, local)
            return out

    def forward_backward(
        self,
        rows: List[Row],
        loss: LossSpec,
        return_logprobs: bool = False,
        rank_of_row: Optional[List[int]] = None,
    ) -> Dict[str, Any]:
        assign = rank_of_row or lpt_assign([len(r.tokens) for r in rows], self.world_size)
        index = [[i for i, a in enumerate(assign) if a == r] for r in range(self.world_size)]
        loss_json = asdict(loss)

        def message(rank: int) -> Dict[str, Any]:
            return {
                "op": "forward_backward",
                "rows": [row_to_json(rows[i]) for i in index[rank]],
                "index": index[rank],
                "loss": loss_json,
                "want_lp": return_logprobs,
            }

        with self.lock, self.engine.lock:
            if not self.engine.initialized:
                raise not_initialized()
            own, replies = self._run(
                "forward_backward",
                message,
                lambda: self.ops.forward_backward(
                    [rows[i] for i in index[0]], index[0], loss, return_logprobs
                ),
            )
        parts = [own] + replies
        out: Dict[str, Any] = {
            "loss": sum(p["loss"] for p in parts),
            "metrics": merge_metrics([p["metrics"] for p in parts]),
            "policy_version": self.engine.policy_version,
            "rank_tokens": [sum(len(rows[i].tokens) for i in idx) for idx in index],
        }
        if return_logprobs:
            logprobs: List[List[float]] = [[] for _ in rows]
            for idx, part in zip(index, parts):
                for i, lp in zip(idx, part["logprobs"]):
                    logprobs[i] = lp
            out["logprobs"] = logprobs
        return out

    def optim_step(self) -> Dict[str, Any]:
        with self.lock:
            self.engine._require()
            message = {"op": "optim_step"}
            out, _ = self._run("optim_step", lambda _r: message, self.engine.optim_step)
            return out

    def zero_grad(self) -> Dict[str, Any]:
        with self.lock:
            self.engine._require()
            out, _ = self._run("zero_grad", lambda _r: {"op": "zero_grad"}, self.engine.zero_grad)
            return out

    def gradients(self) -> Dict[str, Any]:
        return self.engine.gradients()  # rank 0 holds the all-reduced sum, as every rank does

    def state(self) -> Dict[str, Any]:
        out = self.engine.state()
        out["world_size"] = self.world_size
        if self.error is not None:
            out["rank_error"] = self.error.message
            return out
        with self.lock:
            own, replies = self._run("state", lambda _r: {"op": "state"}, self.ops.state)
        out["ranks"] = [own] + replies
        return out


# -- ranks other than 0 ---------------------------------------------------------------------------


def follow(engine: Engine, groups: Groups, channel: Channel) -> None:
    """Runs rank 0's commands until rank 0 goes away; never returns."""
    ops = RankOps(engine, groups)
    while True:
        try:
            msg = channel.recv()
        except CommError:
            os._exit(0)  # rank 0 exited: nothing left to serve
        try:
            reply: Dict[str, Any] = {"ok": True, "result": _handle(engine, ops, msg)}
        except RequestError as e:
            reply = {"ok": False, "error": _error_json(e)}
        except CommError as e:
            # The group is broken (a peer died or hung): tell rank 0 if it listens, then go.
            err = RequestError(503, "rank_failed", f"rank {groups.env.rank}: {e}")
            with contextlib.suppress(CommError):
                channel.send({"ok": False, "error": _error_json(err)}, timeout=5.0)
            os._exit(1)
        except Exception as e:  # a bug on this rank: answer it rather than die silently
            err = RequestError(500, "internal", f"rank {groups.env.rank}: {e}")
            reply = {"ok": False, "error": _error_json(err)}
        try:
            channel.send(reply)
        except CommError:
            os._exit(0)


def _handle(engine: Engine, ops: RankOps, msg: Dict[str, Any]) -> Any:
    op = msg.get("op")
    if op == "init":
        built = None
        error: Optional[RequestError] = None
        try:
            built = ops.build_from_message(msg)
        except RequestError as e:
            error = e
        except Exception as e:
            error = RequestError(500, "internal", f"rank {ops.env.rank} cannot build: {e}")
        if ops.agree(error is not None, "init agreement"):
            raise error or RequestError(422, "failed_elsewhere", "another rank failed to build")
        assert built is not None
        with engine.weights_change(), engine.lock:
            device = ops.device_of(msg["device_type"])
            engine.install(built, device, msg["dtype"], OptimizerSpec(**msg["optimizer"]))
            ops.broadcast_model()
        return None
    if op == "forward_backward":
        rows = [row_from_json(r) for r in msg["rows"]]
        out = ops.forward_backward(rows, msg["index"], loss_from_json(msg["loss"]), msg["want_lp"])
        return out
    if op == "optim_step":
        return engine.optim_step()
    if op == "zero_grad":
        return engine.zero_grad()
    if op == "load_state":
        with engine.weights_change(), engine.lock:
            ops.broadcast_model()
            ops.broadcast_optimizer()
            engine.policy_version = int(msg["policy_version"])
            engine.optimizer_steps = int(msg["optimizer_steps"])
            engine._require().zero_grad(set_to_none=True)
        return None
    if op == "state":
        return ops.state()
    raise bad("op", f"unknown rank command {op!r}")
