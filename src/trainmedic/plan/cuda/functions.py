"""Functions traced as CUDA runs them, where its implementation allocates differently from the CPU's.

Fused dropout, attention without a materialised dropout mask, ``linear``'s in-place bias, and
the optimizers' ``foreach`` default: see ``FunctionsAsOnTarget`` and ``use_foreach``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from trainmedic.devices import Device
from trainmedic.plan.cuda import attention, rnn


def use_foreach(optimizer: torch.optim.Optimizer) -> bool:
    """Switch an optimizer left on its default to ``foreach``, as it would run on CUDA."""
    changed = False
    for group in optimizer.param_groups:
        if "foreach" in group and group["foreach"] is None and not group.get("fused"):
            group["foreach"] = True
            changed = True
    return changed


#: The torch.nn.functional names traced as CUDA runs them; the originals, kept to call through.
_ORIGINALS = {name: getattr(F, name) for name in ("dropout", "linear", "scaled_dot_product_attention")}
_DROPOUT_NOTE = "attention dropout planned as the GPU kernels run it (an RNG seed, no B·H·S² mask)"


class FunctionsAsOnTarget(TorchFunctionMode):
    """Trace the functions whose CUDA implementation allocates differently from the CPU one.

    - ``scaled_dot_product_attention``: traced through the op of the kernel the card picks
      (plan.cuda.attention), which draws dropout from an RNG seed and keeps no B·H·S² mask; where
      the card would take the math path, the CPU's kernel stands in;
    - ``_VF.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu``: cuDNN's allocations (plan.cuda.rnn);
    - ``dropout`` in training: CUDA runs ``native_dropout`` (a one-byte mask beside the output);
      the CPU multiplies by a noise tensor of the input's dtype, four times the mask in fp32.
    - ``linear`` with a bias on a non-contiguous input of more than two dimensions: ATen adds
      the bias in place after the matmul, but out of place for tensor subclasses such as the fake
      tensors of the trace, which would plan one output-sized tensor more than the card holds.

    A torch-function mode sees only the outermost call: ``multi_head_attention_forward`` runs its
    own ``linear`` and ``scaled_dot_product_attention`` with every mode set aside. So the names are
    also replaced in ``torch.nn.functional`` itself while tracing, which its bodies look up.
    """

    def __init__(self, device: Device, notes: list[str]) -> None:
        super().__init__()
        self._device = device
        self._notes = notes
        #: Parts of the trace that are estimates on this device (plan.confidence reads them).
        self.estimates: list[str] = []
        self._by_original = {original: getattr(self, name) for name, original in _ORIGINALS.items()}
        for mode in rnn.GATES:
            self._by_original[getattr(torch, mode)] = functools.partial(self.rnn, mode)
        self._by_original[torch.dropout] = lambda input, p, train: self.dropout(input, p, train)
        self._by_original[torch.dropout_] = lambda input, p, train: self.dropout(
            input, p, train, inplace=True
        )

    def __enter__(self):
        entered = super().__enter__()
        for name in _ORIGINALS:
            setattr(F, name, getattr(self, name))
        return entered

    def __exit__(self, *exc):
        for name, original in _ORIGINALS.items():
            setattr(F, name, original)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        ours = self._by_original.get(func)
        return (ours or func)(*args, **(kwargs or {}))

    def dropout(self, input, p=0.5, training=True, inplace=False):
        if not training or not 0.0 < p < 1.0 or input.numel() == 0:
            return _ORIGINALS["dropout"](input, p, training, inplace)
        output = _FusedDropout.apply(input, float(p))
        return input.copy_(output) if inplace else output

    def rnn(self, mode: str, *args):
        # _VF.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first),
        # gru/rnn_* with hx a tensor; the packed-sequence form (input, batch_sizes, ...) stays on
        # the traced CPU path.
        packed = len(args) != 9 or isinstance(args[3], (list, tuple))  # (data, batch_sizes, hx, params, ...)
        if packed:
            return getattr(torch, mode)(*args)
        note = rnn.note(mode)
        if note not in self._notes:
            self._notes.append(note)
            if self._device.key != rnn.MEASURED_ON or mode != "lstm":
                self.estimates.append(
                    f"cuDNN's {mode} reserve and workspace at the rates measured for an LSTM on {rnn.MEASURED_ON}"
                )
        return rnn.cudnn_rnn(mode, *args)

    def linear(self, input, weight, bias=None):
        if bias is not None and input.dim() > 2 and not input.is_contiguous():
            return torch.matmul(input, weight.t()).add_(bias)
        return _ORIGINALS["linear"](input, weight, bias)

    def scaled_dot_product_attention(
        self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
    ):
        if torch.is_autocast_enabled("cpu"):
            # Autocast casts q, k and v before the kernel is picked (sdpa is on its lower-precision list).
            low = torch.get_autocast_dtype("cpu")
            query, key, value = (
                t.to(low) if t.is_floating_point() and t.dtype != torch.float64 else t
                for t in (query, key, value)
            )
        kernel = attention.sdpa_kernel(
            self._device, query.dtype, int(query.shape[-1]), attn_mask is not None, query.dim()
        )
        fused = kernel != attention.MATH
        if dropout_p and fused and _DROPOUT_NOTE not in self._notes:
            self._notes.append(_DROPOUT_NOTE)
        if not fused or enable_gqa:
            # The CPU's own kernel stands in; a fused kernel draws dropout from a seed, keeping no mask.
            return _ORIGINALS["scaled_dot_product_attention"](
                query,
                key,
                value,
                attn_mask,
                0.0 if fused else dropout_p,
                is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )
        return attention.attention(kernel, query, key, value, attn_mask, dropout_p, is_causal, scale)


class _FusedDropout(torch.autograd.Function):
    """CUDA's ``native_dropout``: a one-byte mask, then the output, both shaped like the input;
    backward scales the gradient by the saved mask (``native_dropout_backward``)."""

    @staticmethod
    def forward(ctx, input, p):
        mask = torch.empty_like(input, dtype=torch.bool)
        output = torch.empty_like(input)
        ctx.save_for_backward(mask)
        ctx.scale = 1.0 / (1.0 - p)
        return output

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return torch.ops.aten.native_dropout_backward(grad, mask, ctx.scale), None
