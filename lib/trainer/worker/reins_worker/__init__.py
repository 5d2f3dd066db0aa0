"""reins trainer worker: one policy (model + AdamW) behind a small HTTP API, in PyTorch.

Modules: `server` (HTTP routes; `python -m reins_worker` runs it), `engine` (model, optimizer,
log-probs, forward/backward, checkpoints), `generation` (the one generation path: continuous
batching over a shared KV cache), `sampling`, `batch` (rows → tensors), `losses`, `model` (the
built-in decoder), `hf_model` (optional: `transformers`), `validate` and `fields` (request
parsing, with defaults, enums and bounds from `contract`: `contract.schema.json`, emitted from the
TypeScript schemas), `reference` (the KL penalty's frozen reference policy), and
the sub-package `tools`: `cpu_probe`, `gpu_bench` (`python -m reins_worker.tools.gpu_bench`) and
`gpu_check` (`python -m reins_worker.tools.gpu_check`), which share `tools.measure`.

Only `torch` is required; `transformers` (and `safetensors`) only for `{"kind": "hf"}` models.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
