"""Ascend C kernels (rms_norm, add_rms_norm, layer_norm, flash-attention forward) with their Python tiling,
PyTorch references, performance models and `torch.ops.npuport.*` registration.

Import `npuport.ascendc_kernels.registry` to register the ops; nothing here imports torch_npu at import time.
"""
