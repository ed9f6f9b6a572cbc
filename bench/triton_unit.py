"""A kernel written in Triton, for bench/compute_prog.py's `triton` program.

Its own module: Triton reads a kernel's source from its file, and only the
tenants that run it pay for importing Triton.
"""
from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

N = 1 << 27  # 512 MiB of fp32 read and written per launch: ~0.25 ms on an H200
BLOCK = 4096


@triton.jit
def _scale_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 1.0001 + 0.5, mask=mask)


def make_unit(dev: torch.device) -> Callable[[], None]:
    x = torch.randn(N, device=dev, dtype=torch.float32)
    y = torch.empty_like(x)
    grid = (triton.cdiv(N, BLOCK),)

    def unit() -> None:
        _scale_add[grid](x, y, N, BLOCK=BLOCK)
    return unit
