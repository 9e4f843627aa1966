"""The layer_norm kernel (optional residual add and beta): Ascend C source (kernel.asc), tiling, references, performance model."""
