"""The one device layer: every CUDA, torch_npu and host-tool specific npuport touches lives in this package.

device.py: the Device classes parity runs on; runtime.py: string-keyed helpers bench uses (resolve, clock, sync,
graphs); backend.py: the only torch_npu import; standin.py: the NPU stand-ins; nvidia.py: the only nvidia-smi /
npu-smi caller; memory.py: free memory; clocks.py: clock state; timer.py and timing_stats.py: timing and its stats.
Nothing here imports torch_npu at import time.
"""
