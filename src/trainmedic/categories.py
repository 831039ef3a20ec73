"""The vocabulary of where a training step's time goes (docs/how-run-measures.md).

Every report splits steady-state wall time into these categories, in this order; the order is
also the order of the JSON ``breakdown`` object and of the stacked bars in the HTML report.
"""

from __future__ import annotations

DATA = "data"
TRANSFER = "transfer"
TINY_OPS = "tiny_ops"
SYNC = "sync"
COMPUTE = "compute"
MEMORY_BANDWIDTH = "memory_bandwidth"
HOST_OTHER = "host_other"

CATEGORIES: tuple[str, ...] = (DATA, TRANSFER, TINY_OPS, SYNC, COMPUTE, MEMORY_BANDWIDTH, HOST_OTHER)

#: Categories that can only be measured on a GPU: on a CPU they are always zero.
GPU_ONLY: frozenset[str] = frozenset({TRANSFER, SYNC, MEMORY_BANDWIDTH})

DESCRIPTIONS: dict[str, str] = {
    DATA: "obtaining the next batch: reads, decoding, transforms, collate, pool sampling",
    TRANSFER: "host-to-device copies of the batch",
    TINY_OPS: "thousands of small tensor operations per step, dominated by dispatch overhead",
    SYNC: "the device idles while the host blocks on it (.item(), .cpu(), print(loss))",
    COMPUTE: "forward, backward and optimizer step keep the device busy (healthy)",
    MEMORY_BANDWIDTH: "kernels limited by memory bandwidth rather than FLOPs",
    HOST_OTHER: "logging, metrics, checkpoint writes and other host bookkeeping",
}
