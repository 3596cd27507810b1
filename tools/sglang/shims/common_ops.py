"""Test support only: the two ``sgl_kernel`` CPU ops SGLang calls without a torch fallback.

What it replaces: ``sgl_kernel``'s compiled CPU library. The registry's ``sglang-kernel`` wheel
is CUDA-only and no CPU build is published, so on a CPU ``sgl_kernel/load_utils.py`` falls back
to ``import common_ops``: this module, on the server's ``PYTHONPATH``. It registers plain-torch
versions of the two bookkeeping ops SGLang's CPU engine calls unconditionally
(``srt/mem_cache/allocation.py``, ``kernels/ops/kvcache/cache_move.py``); every other op SGLang
needs on a CPU has a native torch path. Never installed in the product or its image.
"""

from __future__ import annotations

import ctypes

import torch

_LIBRARY = torch.library.Library("sgl_kernel", "FRAGMENT")
_LIBRARY.define(
    "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, "
    "Tensor start_offset, Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()"
)
_LIBRARY.define(
    "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, "
    "Tensor src_loc) -> ()"
)


def assign_req_to_token_pool_cpu(  # noqa: PLR0917 - the op's schema, positional
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Request ``i``'s token slots ``start[i]:end[i]`` get the next ``end[i] - start[i]`` cache
    locations (``allocation.py``'s Triton kernel ``assign_req_to_token_pool``)."""
    del pool_len  # the row length; req_to_token's own shape says it
    taken = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[taken : taken + count]
        taken += count


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """In every KV buffer (its address and row size in bytes), copy row ``src[i]`` to row
    ``tgt[i]``; every source is read before any target is written, as the Triton kernel
    (``copy_all_layer_kv_cache_tiled``) is safe in place."""
    sources, targets = src_loc.tolist(), tgt_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + s * stride, stride) for s in sources]
        for target, row in zip(targets, rows, strict=True):
            ctypes.memmove(base + target * stride, row, stride)


_LIBRARY.impl("assign_req_to_token_pool_cpu", assign_req_to_token_pool_cpu, "CPU")
_LIBRARY.impl("copy_all_layer_kv_cache_cpu", copy_all_layer_kv_cache_cpu, "CPU")
