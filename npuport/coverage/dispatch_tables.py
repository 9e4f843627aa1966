"""PyTorch's own dispatch tables, read statically from torchgen/packaged/ATen/native/native_functions.yaml.

Used at sync time only (scripts/sync_torch_npu_coverage.py), so an audit never needs the paired torch installed.
The rules reproduce what torchgen registers (checked against the live dispatcher of torch 2.13: every overload
present in both agrees on CompositeImplicitAutograd / CompositeExplicitAutograd[NonFunctional] / CPU):

- no `dispatch:` and no `structured_delegate:` (and not manual_kernel_registration) -> CompositeImplicitAutograd;
  an explicit but empty `dispatch: {}` means no kernel at all;
- `dispatch:` keys may be comma-joined ('CPU, CUDA');
- `ufunc_inner_loop:` generates CPU and CUDA kernels;
- `structured_delegate: X.out` -> CompositeExplicitAutogradNonFunctional (calls X.out through the dispatcher)
  plus X.out's backend kernels;
- `autogen:` names get a CompositeExplicitAutograd kernel, except on CompositeImplicitAutograd-only ops, where
  torchgen generates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from npuport.coverage.names import schema_name

CIA = "CompositeImplicitAutograd"
CEA = "CompositeExplicitAutograd"
CEANF = "CompositeExplicitAutogradNonFunctional"
_BACKEND_FROM_OUT = ("CPU", "CUDA", "Meta", "MPS", "XPU")


@dataclass
class TorchTables:
    """Dispatch keys per aten overload ('add.Tensor', bare default) and the structured delegates."""

    keys: dict[str, frozenset[str]] = field(default_factory=dict)
    structured_delegate: dict[str, str] = field(default_factory=dict)

    def category(self, name: str) -> str:
        """How PrivateUse1 runs an overload that torch_npu does not register itself.

        'implicit' (decomposes above autograd), 'delegate' (structured functional calling its out= variant),
        'explicit' (a composite kernel that also serves PrivateUse1), 'cpu' (only a CPU kernel: torch_npu's CPU
        fallback runs it), 'none' (no kernel usable by the fallback).
        """
        keys = self.keys[name]
        if CIA in keys:
            return "implicit"
        if name in self.structured_delegate:
            return "delegate"
        if CEA in keys or CEANF in keys:
            return "explicit"
        if "CPU" in keys:
            return "cpu"
        return "none"


def parse_native_functions(text: bytes | str) -> TorchTables:
    """Parse native_functions.yaml content into TorchTables."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(text, Loader=loader)
    tables = TorchTables()
    keys: dict[str, set[str]] = {}
    for entry in entries:
        name = schema_name(entry["func"])
        own: set[str] = set()
        if "dispatch" in entry:
            for joined in (entry["dispatch"] or {}):
                own.update(k.strip() for k in str(joined).split(","))
        elif not entry.get("structured_delegate") and not entry.get("manual_kernel_registration"):
            own.add(CIA)
        if entry.get("ufunc_inner_loop"):
            own.update(("CPU", "CUDA"))
        if entry.get("structured_delegate"):
            tables.structured_delegate[name] = str(entry["structured_delegate"])
        keys.setdefault(name, set()).update(own)
        if own == {CIA}:
            continue
        for generated in str(entry.get("autogen") or "").split(","):
            generated = generated.strip()
            if generated:
                keys.setdefault(generated, set()).add(CEA)
    for functional, out in tables.structured_delegate.items():
        keys[functional] |= {CEANF} | {k for k in keys.get(out, ()) if k in _BACKEND_FROM_OUT}
    tables.keys = {name: frozenset(v) for name, v in keys.items()}
    return tables
