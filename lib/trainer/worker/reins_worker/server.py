"""reins trainer worker: an HTTP service holding one policy (see docs/trainer.md).

Run: `python3 -m reins_worker --host 127.0.0.1 --port 0` from `lib/trainer/worker` (or with
that directory on PYTHONPATH). Once listening it prints one line
`REINS_WORKER_READY {"host": ..., "port": ...}` on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

import torch

from .coordinator import Coordinator, follow
from .cpu_probe import cpu_probe
from .dist_env import (
    DEFAULT_TIMEOUT_S,
    init_groups,
    open_channels,
    rank_env,
    spawn_ranks,
    watch_parent,
)
from .engine import Engine, not_initialized
from .generation import GenerateScheduler, GenJob
from .rank_ops import check_rank_of_row
from .validate import (
    GenerateSpec,
    RequestError,
    parse_forward_backward,
    parse_generate,
    parse_init,
    parse_export,
    parse_logprobs,
    parse_path,
)

MAX_BODY_BYTES = 512 * 1024 * 1024
# Measured once at start-up (cpu_probe.py); served by /health.
CPU_PROBE: Dict[str, Any] = {}


class StreamJob(GenJob):
    """A generate job whose events land in a queue read by the request's handler thread."""

    def __init__(self, spec: GenerateSpec) -> None:
        self.events: "queue.Queue[Tuple[str, Any]]" = queue.Queue()
        super().__init__(
            spec,
            lambda ids, lps: self.events.put(("chunk", (ids, lps))),
            lambda reason, version: self.events.put(("done", (reason, version))),
            lambda err: self.events.put(("error", err)),
        )


def make_handler(
    engine: Engine, scheduler: GenerateScheduler, coordinator: Optional[Coordinator] = None
) -> type:
    """Routes over `engine`; training calls go through `coordinator` when the worker runs
    several data-parallel ranks."""
    trainer: Any = coordinator or engine
    world_size = coordinator.world_size if coordinator else 1

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "reins-worker"
        # Headers and body go out in two writes on a kept-alive connection; with Nagle's
        # algorithm the body then waits for the client's delayed ACK (~40 ms per call).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            if os.environ.get("REINS_WORKER_LOG"):
                sys.stderr.write("worker: " + (format % args) + "\n")

        # -- plumbing ----------------------------------------------------------------------

        def _send_json(self, status: int, payload: Dict[str, Any]) -> None:
            data = json.dumps(payload, allow_nan=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _read_body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True  # the unread body would corrupt the next request
                raise RequestError(413, "too_large", f"body of {length} bytes is too large")
            return self.rfile.read(length) if length else b""

        @staticmethod
        def _parse_json(raw: bytes) -> Any:
            if not raw:
                return {}
            try:
                # NaN literals parse; validation then refuses them naming the field.
                return json.loads(raw)
            except ValueError as e:
                raise RequestError(400, "bad_json", f"(body): invalid JSON: {e}", "(body)")

        def _dispatch(self, method: str) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            try:
                # Read the body before anything can fail: on a kept-alive connection an unread
                # body would be parsed as the next request.
                raw = self._read_body()
                route = ROUTES.get((method, path))
                if route is None:
                    raise RequestError(404, "not_found", f"no route {method} {path}")
                body = self._parse_json(raw) if method == "POST" else None
                result = route(self, body)
                if result is not None:
                    self._send_json(200, result)
            except RequestError as e:
                self._send_json(e.status, e.to_json())
            except (BrokenPipeError, ConnectionResetError):
                pass
            except Exception as e:  # an engine bug must not kill the worker
                traceback.print_exc()
                try:
                    self._send_json(500, {"error": {"code": "internal", "message": str(e)}})
                except OSError:
                    pass

        def do_GET(self) -> None:  # noqa: N802
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch("POST")

        # -- routes --------------------------------------------------------------------------

        def health(self, _body: Any) -> Dict[str, Any]:
            if coordinator is not None and coordinator.error is not None:
                raise coordinator.error  # 503: this worker cannot train any more
            return {
                "ok": True,
                "initialized": engine.initialized,
                "policy_version": engine.policy_version,
                "device": str(engine.device),
                "pid": os.getpid(),
                "world_size": world_size,
                **engine.generation_status(),
                **CPU_PROBE,
            }

        def state(self, _body: Any) -> Dict[str, Any]:
            return trainer.state()

        def init(self, body: Any) -> Dict[str, Any]:
            return trainer.init(parse_init(body))

        def save(self, body: Any) -> Dict[str, Any]:
            return trainer.save(parse_path(body))

        def load(self, body: Any) -> Dict[str, Any]:
            return trainer.load(parse_path(body))

        def export(self, body: Any) -> Dict[str, Any]:
            return engine.export(parse_export(body))

        def logprobs(self, body: Any) -> Dict[str, Any]:
            if not engine.initialized:
                raise not_initialized()
            seqs, temperature = parse_logprobs(body, engine.vocab_size, engine.max_seq_len)
            return engine.logprobs(seqs, temperature)

        def forward_backward(self, body: Any) -> Dict[str, Any]:
            if not engine.initialized:
                raise not_initialized()
            rows, loss, want_lp = parse_forward_backward(
                body, engine.vocab_size, engine.max_seq_len
            )
            ranks = check_rank_of_row(body.get("rank_of_row"), len(rows), world_size)
            if coordinator is not None:
                return coordinator.forward_backward(rows, loss, want_lp, ranks)
            return engine.forward_backward(rows, loss, want_lp)

        def optim_step(self, _body: Any) -> Dict[str, Any]:
            return trainer.optim_step()

        def zero_grad(self, _body: Any) -> Dict[str, Any]:
            return trainer.zero_grad()

        def gradients(self, _body: Any) -> Dict[str, Any]:
            return trainer.gradients()

        def generate(self, body: Any) -> Optional[Dict[str, Any]]:
            if not engine.initialized:
                raise not_initialized()
            spec = parse_generate(body, engine.vocab_size, engine.max_seq_len)
            job = StreamJob(spec)
            scheduler.submit(job)
            if not spec.stream:
                ids: List[int] = []
                lps: List[float] = []
                while True:
                    kind, value = job.events.get()
                    if kind == "chunk":
                        ids.extend(value[0])
                        lps.extend(value[1])
                    elif kind == "error":
                        raise value
                    else:
                        return {
                            "ids": ids,
                            "logprobs": lps,
                            "finish_reason": value[0],
                            "policy_version": value[1],
                        }
            kind, value = job.events.get()
            if kind == "error":
                raise value
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while True:
                    if kind == "chunk":
                        line = {"ids": value[0], "logprobs": value[1]}
                    elif kind == "error":
                        line = value.to_json()
                    else:
                        line = {"done": True, "finish_reason": value[0], "policy_version": value[1]}
                    self._write_chunk((json.dumps(line) + "\n").encode())
                    if kind != "chunk":
                        break
                    kind, value = job.events.get()
                self._write_chunk(b"")
            except (BrokenPipeError, ConnectionResetError, OSError):
                # The client went away: stop sampling for it, keep the batch going for others.
                job.cancelled = True
                self.close_connection = True
            return None

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    ROUTES = {
        ("GET", "/health"): Handler.health,
        ("GET", "/state"): Handler.state,
        ("POST", "/init"): Handler.init,
        ("POST", "/save"): Handler.save,
        ("POST", "/load"): Handler.load,
        ("POST", "/export"): Handler.export,
        ("POST", "/logprobs"): Handler.logprobs,
        ("POST", "/forward_backward"): Handler.forward_backward,
        ("POST", "/optim_step"): Handler.optim_step,
        ("POST", "/zero_grad"): Handler.zero_grad,
        ("POST", "/debug/gradients"): Handler.gradients,
        ("POST", "/generate"): Handler.generate,
    }
    return Handler


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="reins trainer worker")
    parser.add_argument("--host", default=os.environ.get("REINS_WORKER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("REINS_WORKER_PORT", "0")))
    parser.add_argument("--batch-window-ms", type=float, default=3.0)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=int(os.environ.get("REINS_TORCH_THREADS", "0"))
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="exit when the process that started the worker goes away",
    )
    parser.add_argument(
        "--ranks",
        type=int,
        default=1,
        help="data-parallel ranks on this machine (one per GPU); this process is rank 0 and "
        "starts the others. Under torchrun leave it out: RANK/WORLD_SIZE are read instead",
    )
    parser.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default=None,
        help="torch.distributed backend (auto: nccl with GPUs, else gloo)",
    )
    parser.add_argument(
        "--collective-timeout-s",
        type=float,
        default=float(os.environ.get("REINS_COLLECTIVE_TIMEOUT_S", DEFAULT_TIMEOUT_S)),
        help="how long a rank waits for the others in one collective before the call fails",
    )
    args = parser.parse_args(argv)
    if args.ranks < 1:
        parser.error("--ranks must be >= 1")
    if args.exit_with_parent:
        # A worker orphaned by a crashed client would hold its port and memory forever.
        watch_parent(os.getppid())
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    children = []
    if args.ranks > 1:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            parser.error("--ranks with a torchrun environment (WORLD_SIZE): give one of them")
        child_args = ["--threads", str(args.threads)]
        child_args += ["--collective-timeout-s", str(args.collective_timeout_s)]
        if args.backend:
            child_args += ["--backend", args.backend]
        children = spawn_ranks(args.ranks, child_args)
    env = rank_env(args.backend, args.collective_timeout_s)
    engine = Engine()
    coordinator: Optional[Coordinator] = None
    if env is not None:
        groups = init_groups(env)
        channels = open_channels(env, groups)
        if env.rank != 0:
            follow(engine, groups, channels[0])
            return
        coordinator = Coordinator(engine, groups, channels, children)
    # The serving process (rank 0) measures its CPU matmul rate once, for /health.
    CPU_PROBE.update(cpu_probe())
    if CPU_PROBE["cpu_warning"]:
        print(f"reins worker: warning: {CPU_PROBE['cpu_warning']}", file=sys.stderr, flush=True)
    scheduler = GenerateScheduler(engine, args.batch_window_ms / 1000.0, args.max_batch)
    handler = make_handler(engine, scheduler, coordinator)
    server = ThreadingHTTPServer((args.host, args.port), handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    ready = {"host": host, "port": port}
    if env is not None:
        ready["world_size"] = env.world_size
    print("REINS_WORKER_READY " + json.dumps(ready), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
