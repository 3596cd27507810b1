"""Test support only: pinned host memory becomes ordinary memory on a machine with no GPU.

What it replaces: ``torch``'s pinning. SGLang's LoRA code asks for pinned memory in about 36
places (``srt/lora/``: ``pin_memory=True`` on factories, ``Tensor.pin_memory()``), which raises
"Found no NVIDIA driver" without a GPU. Pinning only speeds host-to-GPU copies, so with
``SGLANG_USE_CPU_ENGINE=1`` and no CUDA device this makes it a no-op in every SGLang process
(``sitecustomize`` on the server's ``PYTHONPATH``). Never installed in the product or its image.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any


def _unpinned(factory: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(factory)
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("pin_memory", None)
        return factory(*args, **kwargs)

    return call


def _install() -> None:
    import torch  # noqa: PLC0415 - only in SGLang's CPU processes

    if torch.cuda.is_available():
        return
    for name in ("empty", "zeros", "ones", "full", "tensor", "arange", "empty_strided"):
        setattr(torch, name, _unpinned(getattr(torch, name)))
    torch.Tensor.pin_memory = lambda self, *_args, **_kwargs: self  # type: ignore[method-assign]


if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
    _install()
