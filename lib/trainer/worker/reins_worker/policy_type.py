"""The type of a loaded policy: `model.Decoder` or `hf_model.HFPolicy`, each an `nn.Module` with
`hidden`, `head` and `new_cache`. It is `Any` to a type checker because torch types every
attribute of an `nn.Module` as `Tensor | Module`, so no checker can see those methods through
`nn.Module`; this alias names what the value is."""

from typing import Any

Policy = Any
