"""Storage lifetimes of a fake-tensor step, in dispatch order.

Every op's outputs are looked at once, below autograd and autocast, so the tracker sees what a
real step would allocate: saved activations, gradients, optimizer state, casts and temporaries.
A storage's death is seen through a weak reference, the moment Python drops the last tensor
on it, which is when the CUDA caching allocator would get the block back too.

The tracker holds no tensor: a strong reference would keep the memory it measures alive.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from trainmedic.userfiles import is_user_file

ALLOC = "alloc"
FREE = "free"
RNN_WORKSPACE_BYTES_PER_UNIT = 62.6
RNN_SCRATCHPAD_BYTES_PER_UNIT = 16.4

_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WHERE_KEY = "trainmedic_where"
_MODE_METHODS = {"__torch_function__", "__torch_dispatch__"}
#: The planner's stand-ins for the target's behaviour (CUDA autocast's casts, its functions, the
#: fake device): an op they run on the user's behalf is still the user's line's. Stopping at them
#: charged nanoGPT's cross-entropy (model.py:187) to its module's `def forward` line.
_INTERPOSERS = frozenset(
    os.path.join(_OWN_DIR, "plan", *parts)
    for parts in (("cuda", "autocast.py"), ("cuda", "functions.py"), ("fake_device.py",))
)


@dataclass
class Allocation:
    """One storage: how big, who made it, in which phase, and the events that bracket its life."""

    sid: int
    nbytes: int
    op: str
    where: str
    phase: str
    shape: tuple[int, ...]
    dtype: str
    died: int | None = None
    #: Shapes of the op's tensor inputs, for the closed-form formula of a hotspot.
    input_shapes: tuple[tuple[int, ...], ...] = ()
    #: The innermost module running when the op ran ("blocks.0.attn"), "" outside any.
    module: str = ""


#: co_filename -> whether it is the user's code; asked on every op, so each file is judged once.
_USER_FILES: dict[str, bool] = {}


def is_user_code(filename: str) -> bool:
    """Whether ``filename`` is the user's own source, by probe's rule: not the interpreter's, not
    an installed package (torch, transformers, timm...), not trainmedic's."""
    known = _USER_FILES.get(filename)
    if known is None:
        # The torch check also covers a torch run from a source checkout, outside site-packages.
        known = _USER_FILES[filename] = not filename.startswith(_TORCH_DIR) and is_user_file(filename)
    return known


def user_frame_where() -> str:
    """``file:line`` of the innermost frame that is the user's code, or "" when the op was
    called from a library or trainmedic itself (an ``nn.Linear`` the planner's step calls, an
    optimizer's internals, a transformers model's forward) rather than from a line the user wrote."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_OWN_DIR):
            # The planner's own modes sit between the user's call and the op: look through them.
            if name != __file__ and name not in _INTERPOSERS and frame.f_code.co_name not in _MODE_METHODS:
                return ""
        elif is_user_code(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


class StorageTracker(TorchDispatchMode):
    """Records the birth and death of every storage a step creates.

    ``on_op`` (optional) is called after each op with ``(tracker, func, args, outputs, where)``;
    the target model uses it to add what a GPU kernel allocates that the CPU kernel does not.
    """

    def __init__(self, on_op: Callable[..., None] | None = None) -> None:
        super().__init__()
        self.events: list[tuple[str, int]] = []
        self.allocations: dict[int, Allocation] = {}
        #: (index of the first event, phase) each time the phase changes: the step's timeline.
        self.phase_marks: list[tuple[int, str]] = []
        self.phase = "build"
        self.stand_ins: list[str] = []
        self.notes: list[str] = []
        self._sids: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: dict[int, weakref.ref] = {}
        self._next = 0
        self._on_op = on_op
        #: (module path, user line) of the modules whose forward is running, innermost last.
        self.module_stack: list[tuple[str, str]] = []

    @property
    def phase(self) -> str:
        """The part of the step running: build, forward, backward, optimizer or idle."""
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        self._phase = value
        self.phase_marks.append((len(self.events), value))

    # -- identity -----------------------------------------------------------------------------

    def sid_of(self, tensor: torch.Tensor) -> int | None:
        """The tracker's id of the tensor's storage, or None if it was never seen."""
        try:
            return self._sids.get(tensor.untyped_storage())
        except (RuntimeError, NotImplementedError):
            return None

    def adopt(self, tensor: torch.Tensor, op: str, where: str = "") -> int | None:
        """Track a tensor made outside the dispatch (a parameter built before tracing, say)."""
        return self._track(tensor, op, where, ())

    def add_transient(self, nbytes: int, op: str, where: str) -> None:
        """An allocation a GPU kernel makes and frees inside itself (workspaces, accumulators)."""
        self.add_transients([nbytes], op, where)

    def add_transients(self, sizes: list[int], op: str, where: str, after: int | None = None) -> list[int]:
        """Allocations a kernel makes in this order and frees in the reverse one when it returns.

        ``after``: the sid of one of the op's own outputs, allocated by the kernel before these
        (a convolution's backward allocates the input gradient, runs its workspace, then the
        weight gradient); by default they follow everything the op allocated.
        """
        sids = []
        for nbytes in sizes:
            if nbytes > 0:
                sids.append(self._new_allocation(nbytes, op, where, (nbytes,), "uint8", ()))
                self.allocations[sids[-1]].phase = "workspace"
        for sid in reversed(sids):
            self.events.append((FREE, sid))
            self.allocations[sid].died = len(self.events) - 1
        if after is not None and sids:
            self._move_after(after, 2 * len(sids))
        return sids

    def add_kernel_buffers(self, script: list, op: str, where: str) -> None:
        """Buffers a kernel takes and gives back in a given order: ``script`` holds sizes to
        allocate and ``("free", i)`` for the i-th of them; the rest are freed at the end, newest first."""
        sids: list[int | None] = []
        open_: list[int] = []
        for step in script:
            if isinstance(step, tuple):
                sid = sids[step[1]]
                if sid is not None:
                    self.events.append((FREE, sid))
                    self.allocations[sid].died = len(self.events) - 1
                    open_.remove(sid)
                continue
            sid = self._new_allocation(step, op, where, (step,), "uint8", ()) if step > 0 else None
            sids.append(sid)
            if sid is not None:
                self.allocations[sid].phase = "workspace"
                open_.append(sid)
        for sid in reversed(open_):
            self.events.append((FREE, sid))
            self.allocations[sid].died = len(self.events) - 1

    def _move_after(self, sid: int, count: int) -> None:
        """Move the last ``count`` events to just after ``sid``'s allocation, which is among the
        current op's outputs: only those outputs' allocations (alive, no index kept) move down."""
        start = len(self.events) - count
        birth = next(i for i in range(start - 1, -1, -1) if self.events[i] == (ALLOC, sid))
        moved = self.events[start:]
        del self.events[start:]
        self.events[birth + 1 : birth + 1] = moved
        for index in range(birth + 1, len(self.events)):
            kind, other = self.events[index]
            if kind == FREE:
                self.allocations[other].died = index

    def add_persistent(self, nbytes: int, op: str, where: str) -> None:
        """An allocation that lives to the end of the process (the cuBLAS workspace)."""
        if nbytes > 0:
            sid = self._new_allocation(nbytes, op, where, (nbytes,), "uint8", ())
            self.allocations[sid].phase = "workspace"

    # -- dispatch -----------------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            return self._stand_in_scalar(args[0])
        out = func(*args, **kwargs)
        if func is torch.ops.aten.mkldnn_rnn_layer.default:
            out = self._rnn_workspace(args, out)
        elif func is torch.ops.aten.mkldnn_rnn_layer_backward.default and len(args) > 7:
            # ...and its backward allocates a scratchpad inside the kernel: 16.4 bytes per unit.
            self.add_transient(
                int(RNN_SCRATCHPAD_BYTES_PER_UNIT * args[7].numel()), "oneDNN LSTM scratchpad (estimate)", ""
            )
        where, module = self.site()
        name = func.__name__.split(".")[0]
        if not where:
            # Backward runs in autograd's engine, below any user frame: the node being run
            # remembers the user's line of the forward op it differentiates.
            node = torch._C._current_autograd_node()
            if node is not None:
                # Node.metadata is a dict property; torch's Node declares it as a method.
                where, module = node.metadata.get(_WHERE_KEY, ("", ""))  # type: ignore[attr-defined]
                name = f"{name} (backward)"
        in_shapes = tuple(
            tuple(a.shape) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
        )
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self._track(tensor, name, where, in_shapes, module)
        if self._on_op is not None:
            self._on_op(self, func, args, out, where)
        return out

    def site(self) -> tuple[str, str]:
        """``(user line, module path)`` of the op being run in the forward pass."""
        where = user_frame_where()
        module = self.module_stack[-1][0] if self.module_stack else ""
        if not where and self.module_stack:
            # Inside torch's own modules (an nn.Linear of a Sequential) the user's line is the
            # one that created the innermost module with a known line.
            where = next((line for _, line in reversed(self.module_stack) if line), "")
        return where, module

    def _rnn_workspace(self, args: tuple, out: tuple) -> tuple:
        # The meta kernel of oneDNN's LSTM layer returns an empty workspace; the real one,
        # saved from the layer's forward to its backward, measured 61-64.6 bytes per time step x
        # sample x hidden unit (torch 2.13, T 16-128, H 64-512, any input size): a fake
        # workspace of that size takes its place, so autograd keeps it as long as the real one.
        output, hy, cy, workspace = out
        training = bool(args[-1]) if args else False
        if training and workspace.numel() == 0:
            workspace = torch.empty(int(RNN_WORKSPACE_BYTES_PER_UNIT * output.numel()), dtype=torch.uint8)
            self.notes.append(
                "LSTM workspace estimated at 62.6 bytes per time step x sample x hidden unit per layer "
                "(measured for oneDNN on the CPU)"
            )
        return output, hy, cy, workspace

    def _stand_in_scalar(self, tensor: torch.Tensor) -> Any:
        # `.item()` on a fake tensor has no value. Planning only needs shapes, so the step goes on
        # with a stand-in, and the plan says where (a value steering control flow may differ).
        # A library's forward (transformers, timm) has no line of the user's: the warning goes to
        # the line that made its module. "" with no module running: an optimizer reading its step counter.
        where, _ = self.site()
        if where and where not in self.stand_ins:
            self.stand_ins.append(where)
        if tensor.dtype.is_floating_point:
            return 1.0
        if tensor.dtype == torch.bool:
            return True
        return 1

    def _track(
        self, tensor: torch.Tensor, op: str, where: str, in_shapes: tuple, module: str = ""
    ) -> int | None:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse and other storage-less layouts
            return None
        sid = self._sids.get(storage)
        if sid is not None:
            return sid
        sid = self._new_allocation(
            storage.nbytes(),
            op,
            where,
            tuple(tensor.shape),
            str(tensor.dtype).replace("torch.", ""),
            in_shapes,
        )
        self.allocations[sid].module = module
        self._sids[storage] = sid
        self._refs[sid] = weakref.ref(storage, self._freed_callback(sid))
        return sid

    def _new_allocation(
        self, nbytes: int, op: str, where: str, shape: tuple, dtype: str, in_shapes: tuple
    ) -> int:
        sid = self._next
        self._next += 1
        self.events.append((ALLOC, sid))
        self.allocations[sid] = Allocation(
            sid, int(nbytes), op, where, self.phase, shape, dtype, input_shapes=in_shapes
        )
        return sid

    def _freed_callback(self, sid: int) -> Callable[[weakref.ref], None]:
        def freed(_ref: weakref.ref) -> None:
            self.events.append((FREE, sid))
            self.allocations[sid].died = len(self.events) - 1
            self._refs.pop(sid, None)

        return freed


class GradFnLabeller(TorchFunctionMode):
    """Label each forward output's autograd node with the user's line that made it.

    Autograd attaches ``grad_fn`` above the dispatcher, so the tracker never sees it; this mode
    runs above autograd, and the backward ops read the label from the node being executed.
    """

    def __init__(self, tracker: StorageTracker) -> None:
        super().__init__()
        self._tracker = tracker

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self._tracker.phase == "forward":
            nodes = [
                t.grad_fn
                for t in tree_flatten(out)[0]
                if isinstance(t, torch.Tensor) and t.grad_fn is not None
            ]
            if nodes:
                label = self._tracker.site()
                if label[0]:
                    _label_new_nodes(nodes, label)
        return out


def _label_new_nodes(nodes: list, label: tuple[str, str]) -> None:
    # One call (``q @ k.T``) can create several nodes (expand, bmm, view): label every node
    # not labelled yet; nodes of earlier calls are labelled already and stop the walk.
    while nodes:
        node = nodes.pop()
        if node is None or _WHERE_KEY in node.metadata or type(node).__name__ == "AccumulateGrad":
            continue
        node.metadata[_WHERE_KEY] = label
        nodes.extend(next_node for next_node, _ in node.next_functions)
