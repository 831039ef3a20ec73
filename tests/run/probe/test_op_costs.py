"""FLOPs and bytes of live ops, counted with tune's byte model, during real CPU steps."""

import torch
from torch import nn

from trainmedic.run.probe.op_costs import OpCostCounter


def _count(step, steps=1):
    step()  # the first step creates the optimizer's state
    counter = OpCostCounter()
    counter.start()
    try:
        for _ in range(steps):
            step()
    finally:
        counter.stop(steps)
    assert counter.failed is None
    return counter.snapshot()


def _adam_step(params):
    optimizer = torch.optim.Adam(params, lr=1e-3, foreach=True)

    def step():
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer.step()

    return step


def test_an_optimizer_step_is_elementwise_and_a_matmul_is_not():
    params = [nn.Parameter(torch.randn(512, 512)) for _ in range(4)]
    adam = _count(_adam_step(params))
    assert adam.flops == 0  # lerp, mul, addcmul, sqrt, addcdiv: no FLOPs by the roofline convention
    assert adam.bytes > 4 * 512 * 512 * 4 * 5  # several passes over params, grads and two moments

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    mm = _count(lambda: a @ b)
    assert mm.flops == 2 * 1024**3
    assert mm.bytes == 3 * 1024 * 1024 * 4  # two inputs read, one output written
    assert mm.flops / mm.bytes > 100  # ~171 FLOP/byte: right of any GPU's fp32 ridge


def test_a_training_step_is_counted_forward_backward_and_optimizer():
    model = nn.Linear(256, 256)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256)

    def step():
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    costs = _count(step, steps=2)
    assert costs.steps == 2
    names = {name for name, *_ in costs.ops}
    assert {"addmm", "mm"} <= names  # forward and the weight gradient
    # forward addmm + the weight gradient's mm per step (the input needs no gradient)
    assert costs.flops / costs.steps == 2 * 2 * 64 * 256 * 256
    assert all(precision == "fp32" for _, precision, *_ in costs.ops)


def test_bf16_ops_carry_their_precision():
    a = torch.randn(64, 64, dtype=torch.bfloat16)
    costs = _count(lambda: a @ a)
    assert {precision for _, precision, *_ in costs.ops} == {"bf16"}
