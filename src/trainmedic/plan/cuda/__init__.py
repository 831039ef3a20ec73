"""What a CUDA device allocates that the CPU kernels of the trace do not.

The planner traces a step with CPU kernels on fake tensors: that fixes the tensors the step
makes and when each dies. The card's kernels add their own allocations, through the same caching
allocator ``torch.cuda.max_memory_allocated`` counts, and some CUDA functions take other paths
than the CPU's. Each module models one of them, checked against allocator traces recorded on a
real card (``tests/plan/gpu_truth``):

- ``functions``: functions traced as CUDA runs them (fused dropout, attention kernels, linear);
- ``blas``: the cuBLAS and cuBLASLt workspaces;
- ``reduce``: the staging buffer of reductions split across blocks;
- ``kernels``: the dispatch hook that adds the kernels' own allocations to the trace.
"""
