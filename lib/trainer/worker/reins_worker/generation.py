"""Continuous batched generation over one shared KV cache.

Requests join the running batch at any decode step (their prompts are prefilled separately,
then their keys/values are copied into the shared cache) and leave it when they finish, so a
long generation never holds short ones back. Every row is right-aligned at a shared write
cursor: row b holds its L_b cached tokens at [cursor − L_b, cursor); RoPE positions are per row,
so where a row sits in the cache does not matter, only the mask does.

All tokens of a response are sampled by one policy version: the engine refuses weight changes
(optim_step, load, init) while rows are active, and admits no new rows while one is waiting.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import torch

from .engine import Engine, not_initialized
from .model import Decoder
from .sampling import make_generator, sample_rows
from .validate import GenerateSpec, RequestError

_GROW = 64  # cache columns added when the cursor reaches the end


class GenJob:
    """One generate request in flight. The decoder calls `emit(ids, logprobs)` per token and
    `finish(reason, version)` once, or `fail(error)` once when the request cannot be served;
    the request's handler sets `cancelled` when its client went away."""

    def __init__(
        self,
        spec: GenerateSpec,
        emit: Callable[[List[int], List[float]], None],
        finish: Callable[[str, int], None],
        fail: Callable[[RequestError], None],
    ) -> None:
        self.spec = spec
        self._emit = emit
        self._finish = finish
        self._fail = fail
        self.cancelled = False
        self.finished = False

    def emit(self, ids: List[int], logprobs: List[float]) -> None:
        self._emit(ids, logprobs)

    def close(self, reason: str, version: int) -> None:
        if not self.finished:
            self.finished = True
            if not self.cancelled:
                self._finish(reason, version)

    def fail(self, error: RequestError) -> None:
        if not self.finished:
            self.finished = True
            if not self.cancelled:
                self._fail(error)


@dataclass
class _Row:
    job: GenJob
    generator: torch.Generator
    budget: int  # new tokens allowed (max_tokens, cut at max_seq_len)
    count: int  # new tokens sampled so far
    cached: int  # tokens in the KV cache (= position of the next fed token)
    version: int
    done: bool = False


class BatchDecoder:
    """Owned by the scheduler thread; every method takes the engine lock per step."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.rows: List[_Row] = []
        self.cache: Any = None  # KVCache (built-in) or HFCache
        self.cursor = 0
        self.logits: Optional[torch.Tensor] = None  # [B, V] float32: next-token logits per row

    @property
    def active(self) -> int:
        return len(self.rows)

    # -- cache layout ----------------------------------------------------------------------------

    def _relayout(self, keep: List[int], extra_rows: int, new_cursor: int, capacity: int) -> Any:
        """New cache holding rows `keep` (right-aligned at new_cursor) + `extra_rows` empty rows."""
        model = self.engine.model
        assert model is not None
        fresh = model.new_cache(len(keep) + extra_rows, capacity, self.engine.dtype)
        if keep and self.cache is not None:
            span = max(self.rows[i].cached for i in keep)
            idx = torch.tensor(keep, dtype=torch.long, device=self.engine.device)
            for layer in range(len(fresh.k)):
                for dst, src in ((fresh.k, self.cache.k), (fresh.v, self.cache.v)):
                    dst[layer][: len(keep), :, new_cursor - span : new_cursor] = src[layer][
                        idx, :, self.cursor - span : self.cursor
                    ]
        return fresh

    # -- admission -------------------------------------------------------------------------------

    def can_admit(self) -> bool:
        # Caches of Hugging Face models cannot be re-laid out: batch them statically.
        return self.active == 0 or self._is_builtin()

    def admit(self, jobs: List[GenJob]) -> None:
        """Prefills `jobs` and merges them into the running batch (engine lock held)."""
        eng = self.engine
        model = eng.model
        assert model is not None
        device = eng.device
        lens = [len(j.spec.prompt_ids) for j in jobs]
        width = max(lens)
        n = len(jobs)
        tokens = torch.zeros(n, width, dtype=torch.long)
        positions = torch.zeros(n, width, dtype=torch.long)
        valid = torch.zeros(n, width, dtype=torch.bool)
        for i, j in enumerate(jobs):
            pad = width - lens[i]
            tokens[i, pad:] = torch.tensor(j.spec.prompt_ids, dtype=torch.long)
            positions[i, pad:] = torch.arange(lens[i])
            valid[i, pad:] = True  # left padding is never attended to
        tokens, positions, valid = tokens.to(device), positions.to(device), valid.to(device)
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        eye = torch.eye(width, dtype=torch.bool, device=device)[None]
        mask = ((causal[None] & valid[:, None, :]) | eye)[:, None]

        if self.active == 0:
            self.cache = None
            self.logits = None
        budgets = [min(j.spec.max_tokens, eng.max_seq_len - ln) for j, ln in zip(jobs, lens)]
        if not self._is_builtin():
            # Static path (HF models): one prefill into a fresh cache, then decode to the end.
            cache = model.new_cache(n, width + max(budgets), eng.dtype)
            with torch.no_grad(), eng.autocast():
                logits = model(tokens, positions, mask, False, cache)[:, -1].float()
            self.cache = cache
            self.cursor = width
            self.logits = logits
        else:
            tmp = model.new_cache(n, width, eng.dtype)
            with torch.no_grad(), eng.autocast():
                new_logits = model(tokens, positions, mask, False, tmp)[:, -1].float()
            keep = list(range(self.active))
            cursor = max([width] + [r.cached for r in self.rows])
            capacity = cursor + _GROW
            fresh = self._relayout(keep, n, cursor, capacity)
            for layer in range(len(fresh.k)):
                fresh.k[layer][len(keep) :, :, cursor - width : cursor] = tmp.k[layer][:, :, :width]
                fresh.v[layer][len(keep) :, :, cursor - width : cursor] = tmp.v[layer][:, :, :width]
            self.cache = fresh
            self.cursor = cursor
            if keep:
                assert self.logits is not None  # the kept rows' logits
                new_logits = torch.cat([self.logits, new_logits])
            self.logits = new_logits
        for j, ln, budget in zip(jobs, lens, budgets):
            self.rows.append(
                _Row(
                    job=j,
                    generator=make_generator(j.spec.seed, device),
                    budget=budget,
                    count=0,
                    cached=ln,
                    version=eng.policy_version,
                )
            )

    def _is_builtin(self) -> bool:
        return isinstance(self.engine.model, Decoder)

    # -- decoding --------------------------------------------------------------------------------

    def step(self) -> int:
        """Samples one token for every live row and feeds it back; returns how many rows
        finished (stop id, budget, or cancelled) in this step."""
        eng = self.engine
        model = eng.model
        assert model is not None and self.logits is not None
        newly_done = 0
        for row in self.rows:
            if not row.done and row.job.cancelled:
                row.done = True
                newly_done += 1
                row.job.close("length", row.version)  # silent: its client is gone
        sampling = [i for i, r in enumerate(self.rows) if not r.done]
        next_ids = [0] * len(self.rows)
        if sampling:
            specs = [self.rows[i].job.spec for i in sampling]
            tok_t, lp_t = sample_rows(
                self.logits[sampling] if len(sampling) < len(self.rows) else self.logits,
                [s.temperature for s in specs],
                [s.top_p for s in specs],
                [self.rows[i].generator for i in sampling],
            )
            # The step's one read-back: every row's token and logprob together.
            toks: List[int] = tok_t.tolist()
            lps: List[float] = lp_t.float().tolist()
            for i, spec, tok, lp in zip(sampling, specs, toks, lps):
                row = self.rows[i]
                row.count += 1
                row.job.emit([tok], [lp])
                if tok in spec.stop_ids or row.count >= row.budget:
                    row.done = True
                    newly_done += 1
                    row.job.close("stop" if tok in spec.stop_ids else "length", row.version)
                next_ids[i] = tok
        live = [i for i, r in enumerate(self.rows) if not r.done]
        if not live:
            self.rows = []
            self.cache = None
            self.logits = None
            return newly_done
        relayout = self._is_builtin()
        if relayout and (len(self.rows) - len(live)) * 4 >= len(self.rows):
            # Drop finished rows once they are a quarter of the batch: less wasted compute.
            cursor = max(self.rows[i].cached for i in live)
            self.cache = self._relayout(live, 0, cursor, cursor + _GROW)
            self.cursor = cursor
            self.rows = [self.rows[i] for i in live]
            next_ids = [next_ids[i] for i in live]
        if relayout and self.cursor + 1 > self.cache.k[0].shape[2]:
            capacity = self.cursor + max(_GROW, self.cursor // 2)
            self.cache = self._relayout(list(range(len(self.rows))), 0, self.cursor, capacity)
        device = eng.device
        cached = torch.tensor([r.cached for r in self.rows], dtype=torch.long, device=device)
        cols = torch.arange(self.cursor + 1, device=device)
        # Row b's keys: its `cached` tokens right-aligned at the cursor, plus the new one.
        mask = (cols[None, :] >= (self.cursor - cached)[:, None])[:, None, None, :]
        ids = torch.tensor(next_ids, dtype=torch.long, device=device)[:, None]
        self.cache.length = self.cursor
        with torch.no_grad(), eng.autocast():
            self.logits = model(ids, cached[:, None], mask, False, self.cache)[:, -1].float()
        self.cursor += 1
        for r in self.rows:
            r.cached += 1
        return newly_done

    def fail_all(self) -> List[GenJob]:
        """Drops every row; returns the jobs that had not finished."""
        jobs = [r.job for r in self.rows if not r.done]
        self.rows = []
        self.cache = None
        self.logits = None
        return jobs


class GenerateScheduler:
    """The one generation path: continuous batching on a thread of its own. New requests join
    the running batch at the next decode step (the first ones of an idle period are collected
    for `window_s`); finished ones leave it. The HTTP handlers and the GPU benchmark both submit
    here."""

    def __init__(self, engine: Engine, window_s: float, max_batch: int) -> None:
        self.engine = engine
        self.window_s = window_s
        self.max_batch = max_batch
        # None is the stop sentinel of close().
        self.queue: "queue.Queue[Optional[GenJob]]" = queue.Queue()
        self.decoder = BatchDecoder(engine)
        self._stopping = False
        self.thread = threading.Thread(target=self._loop, name="generate", daemon=True)
        self.thread.start()

    def submit(self, job: GenJob) -> None:
        self.queue.put(job)

    def close(self, timeout: float = 30.0) -> None:
        """Stops the thread once the jobs it holds are done (a process that exits while the
        thread sits in torch code can abort)."""
        self.queue.put(None)
        self.thread.join(timeout)

    def _take(self, waiting: List[GenJob], job: Optional[GenJob]) -> None:
        if job is None:
            self._stopping = True
        else:
            waiting.append(job)

    def _collect(self, waiting: List[GenJob]) -> List[GenJob]:
        if not waiting and self.decoder.active == 0:
            self._take(waiting, self.queue.get())  # idle: sleep until a request comes
            deadline = time.monotonic() + self.window_s
            while len(waiting) < self.max_batch and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    self._take(waiting, self.queue.get(timeout=left))
                except queue.Empty:
                    break
        while True:
            try:
                self._take(waiting, self.queue.get_nowait())
            except queue.Empty:
                break
        return [j for j in waiting if not j.cancelled]

    @staticmethod
    def _fail(jobs: List[GenJob], err: Exception) -> None:
        if not isinstance(err, RequestError):
            traceback.print_exc()
            err = RequestError(500, "internal", f"generation failed: {err}")
        for j in jobs:
            j.fail(err)

    def _loop(self) -> None:
        waiting: List[GenJob] = []
        while True:
            waiting = self._collect(waiting)
            if self._stopping and not waiting and self.decoder.active == 0:
                return
            room = self.max_batch - self.decoder.active
            if waiting and room > 0 and self.decoder.can_admit():
                batch, rest = waiting[:room], waiting[room:]
                if self.engine.gen_try_start(len(batch)):
                    waiting = rest
                    try:
                        with self.engine.lock:
                            if not self.engine.initialized:
                                raise not_initialized()
                            self.decoder.admit(batch)
                    except Exception as e:  # the batch never joined: fail it alone
                        self.engine.gen_finished(len(batch))
                        self._fail(batch, e)
                elif self.decoder.active == 0:
                    self.engine.wait_weights_idle()  # a weight change runs: queue meanwhile
                    continue
            if self.decoder.active == 0:
                continue
            try:
                with self.engine.lock:
                    done = self.decoder.step()
                self.engine.gen_finished(done)
            except Exception as e:
                jobs = self.decoder.fail_all()
                self.engine.gen_finished(len(jobs))
                self._fail(jobs, e)
