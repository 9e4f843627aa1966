"""The rms_norm kernel: Ascend C source (kernel.asc), tiling, references (baseline, float64 golden, schedule), performance model."""
