"""The flash-attention forward kernel: Ascend C source (kernel.asc), tiling, references, performance model."""
