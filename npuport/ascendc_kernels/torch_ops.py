"""`torch.ops.npuport.*`: schemas, the reference on CPU / CUDA, meta (fake) kernels, and the NPU kernels.

Uses torch.library.Library(kind="FRAGMENT") + impl, which works from torch 2.1 on and lets other npuport
modules add ops to the same namespace. Dispatch: CompositeExplicitAutograd runs the PyTorch reference (CPU,
CUDA, anything without a more specific kernel); PrivateUse1 (torch_npu's key) runs the compiled Ascend C
kernel through host/launch.py, which raises a clear error if the extension is not built. Forward only: no
autograd formula is registered.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from npuport.ascendc_kernels import _libhold
from npuport.ascendc_kernels.add_rms_norm.reference import add_rms_norm_reference
from npuport.ascendc_kernels.flash_attention.reference import flash_attention_reference, to_bnsd
from npuport.ascendc_kernels.host import launch  # torch_npu is imported by launch only when an NPU kernel runs
from npuport.ascendc_kernels.layer_norm.reference import layer_norm_reference
from npuport.ascendc_kernels.rms_norm.reference import rms_norm_reference

SCHEMAS = {
    "rms_norm": "rms_norm(Tensor x, Tensor gamma, float eps=1e-06) -> (Tensor, Tensor)",
    "add_rms_norm": "add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float eps=1e-06) -> (Tensor, Tensor, Tensor)",
    "layer_norm": ("layer_norm(Tensor x, Tensor gamma, Tensor? beta=None, Tensor? residual=None, float eps=1e-05)"
                   " -> (Tensor, Tensor, Tensor, Tensor)"),
    "flash_attention": ("flash_attention(Tensor q, Tensor k, Tensor v, Tensor? mask=None, bool is_causal=False,"
                        " float? scale=None, str layout=\"BNSD\") -> (Tensor, Tensor)"),
}


def _stat(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


def _rms_meta(x: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), _stat(x)


def _add_rms_meta(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, eps: float = 1e-6) -> Any:
    return torch.empty_like(x1), _stat(x1), torch.empty_like(x1)


def _ln_meta(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor | None = None,
             residual: torch.Tensor | None = None, eps: float = 1e-5) -> Any:
    x_sum = torch.empty_like(x) if residual is not None else x.new_empty(0)
    return torch.empty_like(x), _stat(x), _stat(x), x_sum


def _fa_meta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
             is_causal: bool = False, scale: float | None = None, layout: str = "BNSD") -> Any:
    b, n, s, _ = to_bnsd(q, layout).shape  # type: ignore[arg-type]
    return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty((b, n, s), dtype=torch.float32)


def _npu(name: str) -> Callable[..., Any]:
    def impl(*args: Any, **kwargs: Any) -> Any:
        return getattr(launch, name)(*args, **kwargs)

    impl.__name__ = f"{name}_npu"
    return impl


IMPLS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "rms_norm": (rms_norm_reference, _rms_meta),
    "add_rms_norm": (add_rms_norm_reference, _add_rms_meta),
    "layer_norm": (layer_norm_reference, _ln_meta),
    "flash_attention": (flash_attention_reference, _fa_meta),
}


def ensure_registered() -> None:
    """Define the ops once per process; later calls (re-imports, reloads) are no-ops."""
    if _libhold.LIBS:
        return
    lib = torch.library.Library("npuport", "FRAGMENT")
    for name, schema in SCHEMAS.items():
        reference, meta = IMPLS[name]
        lib.define(schema)
        lib.impl(name, reference, "CompositeExplicitAutograd")
        lib.impl(name, meta, "Meta")
        lib.impl(name, _npu(name), "PrivateUse1")
    _libhold.LIBS.append(lib)
