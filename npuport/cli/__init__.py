"""The `npuport` command line: one module per command, each parsing flags, calling one library function and rendering.

The library function is npuport.api's, except for `kernels`, which calls npuport.ascendc_kernels directly; common.py holds
the one error handler (NpuportError -> exit 2) and the atomic output writer.
"""
