"""The cuBLAS and cuBLASLt workspaces: taken from the caching allocator at the first GEMM of
each kind and kept for the life of the process, so they count in every step's peak.

- cuBLAS: PyTorch's default ``CUBLAS_WORKSPACE_CONFIG`` is ``:4096:2:16:8`` (8.125 MiB) before
  Hopper and 32 MiB from Hopper on; taken at the first matmul of any kind.
- cuBLASLt: ``addmm`` with a one-dimensional bias (``nn.Linear`` on a 2-D input, or a contiguous
  one folded to 2-D) runs through cuBLASLt with the bias fused, which takes a workspace of its own:
  ``CUBLASLT_WORKSPACE_SIZE``, 1 MiB by default (measured: 1 MiB on an H200 with torch 2.11,
  allocated by the first such linear and never by a bias-free matmul).
"""

from __future__ import annotations

import torch

from trainmedic.devices import Device

CUBLAS_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
CUBLAS_WORKSPACE_HOPPER = 32 << 20
CUBLASLT_WORKSPACE = 1 << 20

#: aten op names as the dispatcher sees them (nn.Linear arrives as addmm/mm, bmm from matmul).
MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "_addmm_activation"})


def cublas_workspace(device: Device) -> int:
    hopper = (device.compute_capability or (0, 0)) >= (9, 0)
    return CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE


def uses_cublaslt(name: str, args: tuple) -> bool:
    """Whether this GEMM runs through cuBLASLt with a fused bias (ATen's ``addmm`` Lt path)."""
    if name not in ("addmm", "_addmm_activation") or len(args) < 3:
        return False
    bias, mat1, mat2 = args[:3]
    if not all(isinstance(t, torch.Tensor) for t in (bias, mat1, mat2)):
        return False
    return bias.dim() == 1 and mat1.dim() == 2 and mat2.dim() == 2 and min(*mat1.shape, *mat2.shape) > 1
