"""``torch.autocast("cuda")`` for the fake CPU tensors of the trace.

Autocast's casts are tensors too, and the CPU's autocast casts other ops than CUDA's: on the CPU
``cross_entropy`` casts its logits to fp32 before ``log_softmax``; on CUDA ``log_softmax`` runs
in bf16 and only ``nll_loss`` casts; CUDA runs ``layer_norm``, ``softmax``, ``exp`` and the
reductions in fp32, the CPU in bf16. So while tracing, the CPU's autocast kernels are replaced
by CUDA's policy (ATen's ``autocast_mode.cpp``: the CUDA lists) and the CPU-only entries fall
through; ``torch.library`` puts the CPU's own kernels back when the trace ends.

The weight casts of ``lower_precision_fp`` are cached per parameter until the autocast region
ends, as CUDA's ``cached_cast`` does: a weight used twice is cast once, and the cast lives until
the forward's autocast exits (longer, when backward saved it).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map

_LOWER = "lower_precision_fp"
_FP32 = "fp32"
_SET_DTYPE = "fp32_set_opt_dtype"
_APPEND_DTYPE = "fp32_append_dtype"
_PROMOTE = "promote"
_BANNED = "banned"

#: CUDA's autocast policy per op (overload names as the dispatcher spells them).
CUDA_POLICY: dict[str, str] = {
    **dict.fromkeys(
        (
            "_convolution",
            "_convolution.deprecated",
            "conv1d",
            "conv2d",
            "conv3d",
            "conv_tbc",
            "conv_transpose1d",
            "conv_transpose2d.input",
            "conv_transpose3d.input",
            "convolution",
            "cudnn_convolution",
            "cudnn_convolution_transpose",
            "prelu",
            "addmm",
            "addmv",
            "addr",
            "matmul",
            "einsum",
            "mm",
            "mv",
            "linalg_vecdot",
            "linear",
            "addbmm",
            "baddbmm",
            "bmm",
            "chain_matmul",
            "linalg_multi_dot",
            "_thnn_fused_lstm_cell",
            "_thnn_fused_gru_cell",
            "lstm_cell",
            "gru_cell",
            "rnn_tanh_cell",
            "rnn_relu_cell",
            "_scaled_dot_product_flash_attention",
            "scaled_dot_product_attention",
        ),
        _LOWER,
    ),
    **dict.fromkeys(
        (
            "acos",
            "asin",
            "cosh",
            "erfinv",
            "exp",
            "expm1",
            "log",
            "log10",
            "log2",
            "log1p",
            "reciprocal",
            "rsqrt",
            "sinh",
            "tan",
            "pow.Tensor_Scalar",
            "pow.Tensor_Tensor",
            "pow.Scalar",
            "softplus",
            "layer_norm",
            "native_layer_norm",
            "group_norm",
            "rms_norm",
            "frobenius_norm.dim",
            "nuclear_norm",
            "nuclear_norm.dim",
            "cosine_similarity",
            "poisson_nll_loss",
            "cosine_embedding_loss",
            "nll_loss",
            "nll_loss2d",
            "hinge_embedding_loss",
            "kl_div",
            "l1_loss",
            "smooth_l1_loss",
            "huber_loss",
            "mse_loss",
            "margin_ranking_loss",
            "multilabel_margin_loss",
            "soft_margin_loss",
            "triplet_margin_loss",
            "multi_margin_loss",
            "binary_cross_entropy_with_logits",
            "dist",
            "pdist",
            "cdist",
            "renorm",
            "logsumexp",
            "upsample_nearest1d",
            "upsample_nearest2d",
            "upsample_nearest3d",
            "_upsample_nearest_exact1d",
            "_upsample_nearest_exact2d",
            "_upsample_nearest_exact3d",
            "upsample_linear1d",
            "upsample_bilinear2d",
            "_upsample_bilinear2d_aa",
            "upsample_trilinear3d",
            "upsample_bicubic2d",
            "_upsample_bicubic2d_aa",
        ),
        _FP32,
    ),
    **dict.fromkeys(
        (
            "prod",
            "prod.dim_int",
            "softmax.int",
            "log_softmax.int",
            "cumprod",
            "cumsum",
            "linalg_vector_norm",
            "linalg_matrix_norm",
            "linalg_matrix_norm.str_ord",
            "sum",
            "sum.dim_IntList",
        ),
        _SET_DTYPE,
    ),
    **dict.fromkeys(("norm.Scalar", "norm.ScalarOpt_dim"), _APPEND_DTYPE),
    **dict.fromkeys(
        (
            "addcdiv",
            "addcmul",
            "atan2",
            "bilinear",
            "cross",
            "dot",
            "vdot",
            "grid_sampler",
            "index_put",
            "tensordot",
            "scatter_add",
        ),
        _PROMOTE,
    ),
    "binary_cross_entropy": _BANNED,
}


class CudaAutocast:
    """Install CUDA's autocast policy on the CPU's autocast key for the life of a trace.

    ``region(dtype)`` is the autocast context of one forward: CPU autocast switched on (so the
    key is active), the weight-cast cache emptied when it ends.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._library: Any = None

    def __enter__(self) -> CudaAutocast:
        self._library = torch.library.Library("aten", "IMPL")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overriding a previously registered kernel": on purpose
                for name in _cpu_only_ops():
                    self._library.impl(name, torch.library.fallthrough_kernel, "AutocastCPU")
                for name, policy in CUDA_POLICY.items():
                    if _exists(name):
                        self._library.impl(name, self._kernel(name, policy), "AutocastCPU")
        except BaseException:
            self.__exit__(None, None, None)  # the CPU's own kernels back, whatever was registered
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._cache.clear()
        if self._library is not None:
            self._library._destroy()
            self._library = None

    @contextlib.contextmanager
    def region(self, dtype: torch.dtype) -> Iterator[None]:
        try:
            with torch.autocast("cpu", dtype=dtype):
                yield
        finally:
            self._cache.clear()

    def _kernel(self, name: str, policy: str) -> Callable[..., Any]:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")

        def kernel(*args, **kwargs):
            low = torch.get_autocast_dtype("cpu")
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
                if policy == _LOWER:
                    args, kwargs = tree_map(lambda a: self._cached_cast(a, low), (args, kwargs))
                elif policy == _FP32:
                    args, kwargs = tree_map(lambda a: _cast(a, torch.float32), (args, kwargs))
                elif policy == _SET_DTYPE:
                    if _eligible(args[0]):
                        args, kwargs = _with_dtype(op, args, kwargs, torch.float32)
                elif policy == _APPEND_DTYPE and _eligible(args[0]):
                    # norm.Scalar(self, p=2) / norm.ScalarOpt_dim(self, p, dim, keepdim=False), called
                    # with dtype=float; a Python kernel gets the call without its trailing defaults.
                    bound = {**dict(zip(("self", "p", "dim", "keepdim"), args)), **kwargs}
                    if overload == "Scalar":
                        return torch.ops.aten.norm.ScalarOpt_dtype(
                            bound["self"], bound.get("p", 2), dtype=torch.float32
                        )
                    return torch.ops.aten.norm.ScalarOpt_dim_dtype(
                        bound["self"],
                        bound["p"],
                        bound["dim"],
                        bound.get("keepdim", False),
                        dtype=torch.float32,
                    )
                elif policy == _PROMOTE:
                    widest = low
                    for a in _tensors(args, kwargs):
                        if _eligible(a) and torch.float32 in (widest, a.dtype):
                            widest = torch.float32
                    args, kwargs = tree_map(lambda a: _cast(a, widest), (args, kwargs))
                elif policy == _BANNED:
                    raise RuntimeError(
                        f"torch.nn.functional.{packet} is unsafe to autocast on CUDA and raises there; "
                        "use binary_cross_entropy_with_logits (BCEWithLogitsLoss) under autocast."
                    )
                return op(*args, **kwargs)

        return kernel

    def _cached_cast(self, value: Any, dtype: torch.dtype) -> Any:
        """``cached_cast``: a parameter's cast is made once per region and kept until it ends."""
        if not _eligible(value) or value.dtype == dtype:
            return value
        cacheable = (
            value.dtype == torch.float32 and value.requires_grad and value.is_leaf and not value._is_view()
        )
        if not cacheable:
            return value.to(dtype)
        hit = self._cache.get(id(value))
        if hit is None or hit[0] is not value:
            hit = self._cache[id(value)] = (value, value.to(dtype))
        return hit[1]


def _eligible(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float64


def _cast(value: Any, dtype: torch.dtype) -> Any:
    return value.to(dtype) if _eligible(value) and value.dtype != dtype else value


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map(lambda a: found.append(a) if isinstance(a, torch.Tensor) else None, (args, kwargs))
    return found


def _with_dtype(op, args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple[tuple, dict]:
    """The call with its optional ``dtype`` set where the caller left it out (``set_opt_dtype``)."""
    index = [a.name for a in op._schema.arguments].index("dtype")
    if index < len(args):
        given = args[index]
        return ((*args[:index], dtype, *args[index + 1 :]), kwargs) if given is None else (args, kwargs)
    return (args, {**kwargs, "dtype": dtype}) if kwargs.get("dtype") is None else (args, kwargs)


def _exists(name: str) -> bool:
    packet, _, overload = name.partition(".")
    return hasattr(torch.ops.aten, packet) and hasattr(getattr(torch.ops.aten, packet), overload or "default")


@functools.cache
def _cpu_only_ops() -> tuple[str, ...]:
    """Ops the CPU's autocast casts and CUDA's does not: they fall through, as on CUDA."""
    names = torch._C._dispatch_get_all_op_names()
    cuda = {f"aten::{name}" for name in CUDA_POLICY}
    return tuple(
        n.removeprefix("aten::")
        for n in names
        if n.startswith("aten::")
        and n not in cuda
        and torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCPU")
    )
