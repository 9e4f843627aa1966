"""npuport: what a PyTorch model really runs, and what changes when it moves from CUDA to Ascend NPU."""

__version__ = "0.1.0"
