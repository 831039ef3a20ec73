"""Functions traced as CUDA runs them, where its implementation allocates differently from the CPU's.

Fused dropout, attention without a materialised dropout mask, ``linear``'s in-place bias, and
the optimizers' ``foreach`` default: see ``FunctionsAsOnTarget`` and ``use_foreach``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


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

    - ``scaled_dot_product_attention`` with ``dropout_p > 0``: the CPU takes the math path and
      materialises B·H·S² scores and a mask; the GPU's fused kernels draw dropout from an RNG
      seed and keep neither, so the call is traced without dropout.
    - ``dropout`` in training: CUDA runs ``native_dropout`` (a one-byte mask beside the output);
      the CPU multiplies by a noise tensor of the input's dtype, four times the mask in fp32.
    - ``linear`` with a bias on a non-contiguous input of more than two dimensions: ATen adds
      the bias in place after the matmul, but out of place for tensor subclasses such as the fake
      tensors of the trace, which would plan one output-sized tensor more than the card holds.

    A torch-function mode sees only the outermost call: ``multi_head_attention_forward`` runs its
    own ``linear`` and ``scaled_dot_product_attention`` with every mode set aside. So the names are
    also replaced in ``torch.nn.functional`` itself while tracing, which its bodies look up.
    """

    def __init__(self, notes: list[str]) -> None:
        super().__init__()
        self._notes = notes
        self._by_original = {original: getattr(self, name) for name, original in _ORIGINALS.items()}
        self._by_original[torch.dropout] = lambda input, p, train: self.dropout(input, p, train)
        self._by_original[torch.dropout_] = lambda input, p, train: self.dropout(input, p, train, inplace=True)

    def __enter__(self):
        for name in _ORIGINALS:
            setattr(F, name, getattr(self, name))
        return super().__enter__()

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
        output = torch.native_dropout(input, float(p), True)[0]
        return input.copy_(output) if inplace else output

    def linear(self, input, weight, bias=None):
        if bias is not None and input.dim() > 2 and not input.is_contiguous():
            return torch.matmul(input, weight.t()).add_(bias)
        return _ORIGINALS["linear"](input, weight, bias)

    def scaled_dot_product_attention(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs):
        if dropout_p:
            dropout_p = 0.0
            if _DROPOUT_NOTE not in self._notes:
                self._notes.append(_DROPOUT_NOTE)
        return _ORIGINALS["scaled_dot_product_attention"](query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **kwargs)
