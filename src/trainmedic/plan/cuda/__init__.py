"""What a CUDA device allocates that the CPU kernels of the trace do not.

The planner traces a step with CPU kernels on fake tensors: that fixes the tensors the step
makes and when each dies. The card's kernels add their own allocations, through the same caching
allocator ``torch.cuda.max_memory_allocated`` counts, and some CUDA functions take other paths
than the CPU's. Each module models one of them, checked against allocator traces recorded on a
real card (``tests/plan/gpu_truth``):

- ``functions``: functions traced as CUDA runs them (fused dropout, attention, RNNs, linear);
- ``autocast``: CUDA autocast's cast lists in place of the CPU's;
- ``attention``: the kernel ``scaled_dot_product_attention`` picks, its op and buffers;
- ``rnn``: cuDNN's LSTM, GRU and RNN (flat weights, reserve, workspaces);
- ``blas``: the cuBLAS and cuBLASLt workspaces;
- ``reduce``: the staging buffer of reductions split across blocks;
- ``conv``: cuDNN's convolution workspaces, measured per card (``cudnn_workspaces.json``) or estimated;
- ``kernels``: the dispatch hook that adds the kernels' own allocations to the trace.
"""
