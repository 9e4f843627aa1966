"""npuport: what a PyTorch model really runs, and what changes when it moves from CUDA to Ascend NPU.

This module only holds `__version__` and imports nothing, so any layer may read it (docs/architecture.md).
"""

__version__ = "0.1.0"
