"""The data-parallel ranks' plumbing: the torchrun-style environment, the worker's own launcher,
the process groups, and the command channel from rank 0 to the other ranks.

Ranks talk two ways. Commands (which call to run, with which rows) go from rank 0 to each other
rank as length-prefixed JSON over a TCP connection: a rank waits for its next command as long as
the run is idle, with no timeout. Numbers (gradients, agreement flags, weights) go through
`torch.distributed` collectives, every one bounded by the group's timeout, so that a rank that
died or hangs turns into an error on rank 0, not a hang.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, TypeVar

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 600.0
_HEADER = struct.Struct("!Q")
T = TypeVar("T")


class CommError(Exception):
    """A collective or the command channel failed: a rank died, hung, or went away."""


@dataclass
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    backend: str  # "gloo" or "nccl"
    timeout_s: float


def rank_env(backend: Optional[str], timeout_s: float) -> Optional[RankEnv]:
    """The torchrun-style environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`,
    `MASTER_PORT`), or None when this process is not one of several ranks."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or "RANK" not in os.environ:
        return None
    rank = int(os.environ["RANK"])
    if not 0 <= rank < world:
        raise SystemExit(f"reins_worker: RANK {rank} is outside WORLD_SIZE {world}")
    chosen = backend or os.environ.get("REINS_DIST_BACKEND") or "auto"
    if chosen == "auto":
        cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
        chosen = "nccl" if cuda and dist.is_nccl_available() else "gloo"
    return RankEnv(
        rank=rank,
        world_size=world,
        local_rank=int(os.environ.get("LOCAL_RANK", str(rank))),
        master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(os.environ.get("MASTER_PORT", "29500")),
        backend=chosen,
        timeout_s=timeout_s,
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def spawn_ranks(world: int, child_args: List[str]) -> List[subprocess.Popen]:
    """The worker's own launcher: makes this process rank 0 of `world` on this machine and
    starts ranks 1..world-1 as child processes (`python -m reins_worker` with the rank
    environment), each on GPU `LOCAL_RANK` when there are GPUs."""
    port = _free_port("127.0.0.1")
    base = {
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    os.environ.update(base, RANK="0", LOCAL_RANK="0")
    children = []
    for rank in range(1, world):
        env = dict(os.environ, **base, RANK=str(rank), LOCAL_RANK=str(rank))
        children.append(
            subprocess.Popen(
                [sys.executable, "-u", "-m", "reins_worker", *child_args],
                env=env,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        )
    return children


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when rank 0 exits, however it exits."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # elsewhere the rank exits when its command connection closes


@dataclass
class Groups:
    """`main`: the backend of the gradients (NCCL on GPUs); `ctrl`: gloo, for agreement flags
    and small objects (the same group when the backend is gloo)."""

    main: Any
    ctrl: Any
    env: RankEnv

    def for_device(self, device: torch.device) -> Any:
        return self.main if (device.type == "cuda" and self.env.backend == "nccl") else self.ctrl


def init_groups(env: RankEnv) -> Groups:
    if env.backend == "nccl":
        # Collectives that time out raise instead of blocking forever (torch >= 1.x / 2.x names).
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")
        torch.cuda.set_device(env.local_rank)
    os.environ["MASTER_ADDR"] = env.master_addr
    os.environ["MASTER_PORT"] = str(env.master_port)
    # Ranks come up at their own pace (importing torch, loading CUDA): the rendezvous waits
    # longer than a collective may.
    startup = float(os.environ.get("REINS_RENDEZVOUS_TIMEOUT_S", "300"))
    dist.init_process_group(
        env.backend,
        init_method="env://",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=max(startup, env.timeout_s)),
    )
    timeout = timedelta(seconds=env.timeout_s)
    main = dist.new_group(backend=env.backend, timeout=timeout)
    ctrl = main if env.backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return Groups(main=main, ctrl=ctrl, env=env)


def collective(what: str, fn: Callable[[], T]) -> T:
    """Runs one collective; any failure (a peer gone, a timeout) becomes a CommError."""
    try:
        return fn()
    except CommError:
        raise
    except Exception as e:  # gloo/NCCL raise RuntimeError with the transport's message
        raise CommError(f"{what}: {e}") from e


# -- the command channel ------------------------------------------------------------------------


class Channel:
    """Length-prefixed JSON messages over one TCP connection."""

    def __init__(self, sock: socket.socket, peer: int) -> None:
        self.sock = sock
        self.peer = peer
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, message: Dict[str, Any], timeout: Optional[float] = None) -> None:
        data = json.dumps(message, allow_nan=False).encode()
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(_HEADER.pack(len(data)) + data)
        except OSError as e:
            raise CommError(f"rank {self.peer} cannot be reached: {e}") from e

    def recv(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        self.sock.settimeout(timeout)
        try:
            (n,) = _HEADER.unpack(self._exactly(_HEADER.size))
            return json.loads(self._exactly(n))
        except socket.timeout as e:
            raise CommError(f"rank {self.peer} did not answer within {timeout:.0f} s") from e
        except OSError as e:
            raise CommError(f"rank {self.peer}'s connection failed: {e}") from e

    def _exactly(self, n: int) -> bytes:
        parts = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise CommError(f"rank {self.peer} closed its connection (the process exited?)")
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def alive(self) -> bool:
        """False once the peer closed the connection (its process exited)."""
        try:
            self.sock.setblocking(False)
            try:
                return self.sock.recv(1, socket.MSG_PEEK) != b""
            finally:
                self.sock.setblocking(True)
        except BlockingIOError:
            return True
        except OSError:
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def open_channels(env: RankEnv, groups: Groups) -> List[Channel]:
    """Rank 0: listens, tells every rank where (and a per-run secret) through a gloo broadcast,
    and accepts one connection per rank. Other ranks: connect and introduce themselves. Returns
    rank 0's channels by rank (index 0 unused), or the one channel to rank 0."""
    if env.rank == 0:
        loopback = env.master_addr in ("127.0.0.1", "localhost", "::1")
        server = socket.create_server(("127.0.0.1" if loopback else "0.0.0.0", 0))
        server.settimeout(env.timeout_s)
        info: List[Any] = [[env.master_addr, server.getsockname()[1], secrets.token_hex(16)]]
    else:
        info = [None]
    collective(
        "command channel setup",
        lambda: dist.broadcast_object_list(info, src=0, group=groups.ctrl),
    )
    host, port, secret = info[0]
    if env.rank != 0:
        sock = socket.create_connection((host, port), timeout=env.timeout_s)
        channel = Channel(sock, 0)
        channel.send({"rank": env.rank, "secret": secret})
        return [channel]
    channels: List[Optional[Channel]] = [None] * env.world_size
    deadline = time.monotonic() + env.timeout_s
    try:
        while any(c is None for c in channels[1:]):
            server.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                sock, _ = server.accept()
            except socket.timeout:
                raise CommError("not every rank connected its command channel in time") from None
            channel = Channel(sock, -1)
            try:
                hello = channel.recv(timeout=10.0)
            except CommError:
                channel.close()
                continue
            rank = hello.get("rank")
            if (
                hello.get("secret") != secret
                or not isinstance(rank, int)
                or not 0 < rank < len(channels)
                or channels[rank] is not None
            ):
                channel.close()  # not one of ours
                continue
            channel.peer = rank
            channels[rank] = channel
    finally:
        server.close()
    return [c for c in channels if c is not None]


def watch_parent(parent: int) -> None:
    """Exits when `parent` is no longer this process's parent: a rank whose launcher died, or a
    worker orphaned by a crashed client, would hold its port and memory forever."""

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()
