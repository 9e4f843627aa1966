"""The add_rms_norm kernel (residual add fused with RMSNorm): Ascend C source (kernel.asc), tiling, references, performance model."""
