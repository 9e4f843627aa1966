"""The host side of the compiled kernels: build the torch_npu extension (build_ext), find it (loader), launch through it (launch)."""
