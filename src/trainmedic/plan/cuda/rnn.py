"""``nn.LSTM`` (and GRU, RNN) as cuDNN runs it: a stand-in that allocates what ``_cudnn_rnn`` and
its backward do.

On the CPU the trace runs oneDNN's LSTM, one ``mkldnn_rnn_layer`` per layer with a workspace of
its own; on the card ``_VF.lstm`` is one ``_cudnn_rnn`` call over all layers, whose sizes are
cuDNN's. The stand-in is an autograd function over fake tensors that makes the same tensors in
the same order (seen on an H200, cuDNN 9, torch 2.11, for a 2-layer LSTM of 256 units over
64 steps of 128 samples):

- forward: the input copied time-major, the output, ``h_n`` and ``c_n``, a workspace freed at
  once, and the *reserve* space kept for backward; the time-major copy is freed;
- backward: zero ``h_n``/``c_n`` gradients if none came, the input and output gradient copied
  time-major, the input, ``h_0`` and ``c_0`` gradients, a workspace (data pass), then the input
  copied again, one flat buffer for every weight gradient and a workspace (weight pass).

cuDNN's reserve and workspace have no published formula: they are the rates measured there,
22 bytes per time step x sample x hidden unit x layer for the reserve and 33 bytes per time
step x sample x hidden unit for the workspace, scaled by the element size (and for a GRU or a
plain RNN by its gates, a guess no card has checked), and the plan says so.
"""

from __future__ import annotations

import torch

MEASURED_ON = "h200"
RESERVE_BYTES_PER_UNIT = 22  # per time step x sample x hidden unit x layer x direction, fp32
RESERVE_EXTRA = 256
WORKSPACE_BYTES_PER_UNIT = 33  # per time step x sample x hidden unit x direction, fp32
WORKSPACE_EXTRA = 1280


def note(mode: str) -> str:
    """What the plan says of an RNN it planned as cuDNN runs it."""
    rates = (
        f"its reserve ({RESERVE_BYTES_PER_UNIT} B) and workspace ({WORKSPACE_BYTES_PER_UNIT} B per time step x sample x "
        "hidden unit) at the rates measured on an H200 with cuDNN 9"
    )
    if mode != "lstm":
        rates += f" for an LSTM, scaled by its {GATES[mode]} gates to the LSTM's 4"
    return f"{mode.upper().replace('_', ' ')} planned as cuDNN runs it, with {rates}; other cards and cuDNN versions may differ"


def flatten_weights(model: torch.nn.Module) -> None:
    """Put each RNN's weights in one buffer, as ``.to("cuda")`` does (``flatten_parameters``):
    the parameters stay the same objects, their storage becomes one block of the card."""
    for module in model.modules():
        if not isinstance(module, torch.nn.RNNBase):
            continue
        weights = [w for w in module._flat_weights if w is not None]
        if not weights or len({w.dtype for w in weights}) != 1:
            continue
        buffer = torch.empty(sum(w.numel() for w in weights), dtype=weights[0].dtype)
        offset = 0
        with torch.no_grad():
            for w in weights:
                w.data = buffer[offset : offset + w.numel()].view_as(w)
                offset += w.numel()


#: Gates per cell: cuDNN's reserve and workspace are taken to grow with them (measured for LSTM only).
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def cudnn_rnn(
    mode: str, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    """``_VF.lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu``'s result with cuDNN's allocations:
    (output, h_n, c_n) for an LSTM, (output, h_n) for the others."""
    h_0, c_0 = (hx[0], hx[1]) if mode == "lstm" else (hx, None)
    directions = 2 if bidirectional else 1
    hidden = (c_0 if c_0 is not None else h_0).shape[-1]  # an LSTM with proj_size: h_0 is the projection
    scale = input.element_size() / 4 * GATES[mode] / GATES["lstm"]
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    units = steps * batch * hidden * directions
    reserve = (
        int(RESERVE_BYTES_PER_UNIT * scale * units * num_layers) + RESERVE_EXTRA if train else 0
    )  # inference keeps none
    sizes = (reserve, int(WORKSPACE_BYTES_PER_UNIT * scale * units) + WORKSPACE_EXTRA)
    cell = c_0 if c_0 is not None else h_0.new_empty(0)
    output, h_n, c_n = _CudnnRnn.apply(
        input, h_0, cell, sizes, batch_first, h_0.shape[-1] * directions, *params
    )
    return (output, h_n, c_n) if mode == "lstm" else (output, h_n)


class _CudnnRnn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, h_0, c_0, sizes, batch_first, width, *params):
        reserve_bytes, workspace_bytes = sizes
        x = (input.transpose(0, 1) if batch_first else input).contiguous()  # a copy when batch-first
        y = x.new_empty((x.shape[0], x.shape[1], width))
        h_n, c_n = h_0.new_empty(h_0.shape), c_0.new_empty(c_0.shape)
        workspace = torch.empty(workspace_bytes, dtype=torch.uint8)
        reserve = torch.empty(reserve_bytes, dtype=torch.uint8)  # taken while the workspace is held
        del workspace, x  # the time-major copy dies with the call; backward makes its own
        ctx.save_for_backward(input, h_0, c_0, y, reserve, *params)
        ctx.layout = (batch_first, workspace_bytes)
        return (y.transpose(0, 1) if batch_first else y), h_n, c_n

    @staticmethod
    def backward(ctx, grad_output, grad_h_n, grad_c_n):
        input, h_0, c_0, y, _reserve, *params = ctx.saved_tensors  # the reserve: cuDNN reads it here
        batch_first, workspace_bytes = ctx.layout
        grad_h_n = torch.zeros_like(h_0) if grad_h_n is None else grad_h_n
        grad_c_n = torch.zeros_like(c_0) if grad_c_n is None else grad_c_n
        time_major = input.transpose(0, 1) if batch_first else input
        x = torch.empty(time_major.shape, dtype=input.dtype)
        dy = torch.empty(y.shape, dtype=y.dtype)
        dx = torch.empty(time_major.shape, dtype=input.dtype)
        dh_0, dc_0 = torch.empty(h_0.shape, dtype=h_0.dtype), torch.empty(c_0.shape, dtype=c_0.dtype)
        torch.empty(workspace_bytes, dtype=torch.uint8)  # the data pass
        del dy, x
        x = torch.empty(time_major.shape, dtype=input.dtype)
        flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype)
        torch.empty(workspace_bytes, dtype=torch.uint8)  # the weight pass
        del x
        grads, offset = [], 0
        for p in params:
            grads.append(flat[offset : offset + p.numel()].view(p.shape))
            offset += p.numel()
        del grad_h_n, grad_c_n
        return ((dx.transpose(0, 1) if batch_first else dx), dh_0, dc_0, None, None, None, *grads)
