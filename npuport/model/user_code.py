"""What a model file's own code meets while npuport builds and traces it on fake tensors (docs/model-files.md).

- A torch.compile'd function called from build_model() or example_inputs() runs eagerly. Under FakeTensorMode alone
  (an "infra" mode) Dynamo compiles the call, and Inductor's generated code reads the fake tensor's data pointer,
  which points at nothing: the process died with SIGSEGV and no report (torchtitan's get_attention_masks).
  `@torch.compiler.disable` on the caller does not reach a compiled callee; Dynamo's `config.disable` does. The
  traced forward needs nothing of this: Dynamo skips every frame while the recorder's dispatch mode is on the stack.
- `.cuda()` (Tensor.cuda and Module.cuda) moves to the device the audit models: where a tensor made
  without device= is (see _cuda_device for why not the fake "cuda:0" of device="cuda"). torch's own `.cuda()`
  initializes CUDA first, which a CPU-only torch refuses ("not linked with support for cuda devices") although a
  fake tensor needs no device. `torch.cuda.is_available()` is left as it is: it decides which branch the model's
  code takes, and that branch is the one a CPU run takes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

_TORCH_DIR = os.path.dirname(torch.__file__)
_NPUPORT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INHERITED = object()  # torch.Tensor inherits cuda from torch._C.TensorBase: nothing of its own to put back
_SITES_NAMED = 6  # a note names this many call sites, then counts the rest


class CudaCalls:
    """`.cuda()` as a move to the audit's device while entered (`with calls:`, re-entrant), torch's own method back
    on the way out. Each line of the model's code that called it is kept in `sites`, and one note naming them is kept
    up to date in `notes` (the LoadedModel's list) each time the last entry is left. `hook(module)` enters it around
    each call of the module (the traced forward). Not a FakeTensorMode subclass: higher-order operators (flex
    attention, torch.cond) find their fake-tensor rule by the mode's exact type."""

    def __init__(self, notes: list[str]) -> None:
        self.notes = notes
        self.sites: list[str] = []
        self._depth = 0
        self._note: str | None = None
        self._ours: dict[type, Any] = {torch.Tensor: _tensor_cuda(self.sites), torch.nn.Module: _module_cuda(self.sites)}
        self._saved: dict[type, Any] = {}
        # device="cuda" / .to("cuda") in the model's code, where its source names a CUDA device (`watch_devices`):
        # a function mode on every torch call costs the trace time, so only then
        self.devices = False
        self._mode: _CudaDevices | None = None

    def watch_devices(self) -> None:
        """Whether the model's own code (the modules it has loaded outside torch, npuport and installed packages)
        names a CUDA device: then device="cuda" moves to the audit's device too."""
        self.devices = self.devices or any(_names_cuda_device(f) for f in _user_files())

    def __enter__(self) -> CudaCalls:
        if self._depth == 0:
            for owner, method in self._ours.items():
                self._saved[owner] = owner.__dict__.get("cuda", _INHERITED)
                owner.cuda = method  # type: ignore[attr-defined]
            if self.devices:
                self._mode = _CudaDevices(self.sites)
                self._mode.__enter__()
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth:
            return
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for owner, method in self._ours.items():
            if owner.__dict__.get("cuda") is not method:  # a patch the model's code made meanwhile is its own
                continue
            if self._saved[owner] is _INHERITED:
                del owner.cuda  # type: ignore[attr-defined]
            else:
                owner.cuda = self._saved[owner]  # type: ignore[attr-defined]
        if self.sites:
            note = cuda_note(self.sites)
            if self._note in self.notes:
                self.notes[self.notes.index(self._note)] = note
            elif note not in self.notes:
                self.notes.append(note)
            self._note = note

    def hook(self, module: torch.nn.Module) -> None:
        """Entered for each call of `module` (its forward hook is always called, a forward that raises included)."""
        def enter(_module: torch.nn.Module, _args: Any) -> None:  # a pre-hook's return value would replace the args
            self.__enter__()

        def leave(_module: torch.nn.Module, _args: Any, _out: Any) -> None:
            self.__exit__()

        module.register_forward_pre_hook(enter)
        module.register_forward_hook(leave, always_call=True)


class _CudaDevices(TorchFunctionMode):
    """A CUDA device given to a torch call (`device="cuda"`, `.to("cuda")`, `.to(torch.device("cuda", 1))`) as the
    audit's device, as `.cuda()` is: a tensor made on the fake "cuda:0" beside the model's CPU-made fake tensors
    fails on mixed devices, and a CPU-only torch refuses to initialize CUDA for it."""

    def __init__(self, sites: list[str]) -> None:
        super().__init__()
        self.sites = sites

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if _is_cuda(kwargs.get("device")):
            _met(self.sites)
            kwargs = dict(kwargs, device=_cuda_device(None))
        elif func is torch.Tensor.to and len(args) > 1 and _is_cuda(args[1]):
            _met(self.sites)
            args = (args[0], _cuda_device(None), *args[2:])
        return func(*args, **kwargs)


def _is_cuda(device: Any) -> bool:
    if not isinstance(device, (str, torch.device)):
        return False
    try:
        return torch.device(device).type == "cuda"
    except (RuntimeError, ValueError):
        return False


# a CUDA device named in source: device="cuda", .to('cuda:0'), torch.device("cuda")
_CUDA_DEVICE_TEXT = re.compile(r"""(?:device\s*=\s*|\.to\(\s*|torch\.device\(\s*)["']cuda""")


def _user_files() -> list[str]:
    """The .py files of the modules loaded so far that are the model's own code (not torch, npuport, the standard
    library or installed packages)."""
    out = []
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__file__", None)
        if isinstance(name, str) and name.endswith(".py") and not name.startswith((_TORCH_DIR, _NPUPORT_DIR)) \
                and "site-packages" not in name and f"{os.sep}lib{os.sep}python" not in name:
            out.append(name)
    return out


@functools.lru_cache(maxsize=4096)
def _names_cuda_device(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return _CUDA_DEVICE_TEXT.search(fh.read()) is not None
    except OSError:
        return False


def _tensor_cuda(sites: list[str]) -> Any:
    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False,
             memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        _met(sites)
        return self.to(device=_cuda_device(device), non_blocking=non_blocking, memory_format=memory_format)

    cuda.__doc__ = torch.Tensor.cuda.__doc__
    return cuda


def _module_cuda(sites: list[str]) -> Any:
    def cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
        """A module already on the audit's device is left as it is: torch's Module._apply swaps every fake
        parameter, even for a move that changes nothing, and a swap fails once the module has run (weak references
        to its parameters); build_model's own swaps are made tolerant (npuport.trace.run.tolerant_swap)."""
        _met(sites)
        to = _cuda_device(device)
        if all(t.device == to for t in (*self.parameters(), *self.buffers())):
            return self
        return self.to(device=to)

    return cuda


def _met(sites: list[str]) -> None:
    site = _caller()
    if site and site not in sites:
        sites.append(site)


def _cuda_device(device: Any) -> torch.device:
    """Where `.cuda(device)` goes in the audit: the device a tensor made without device= is on, which is the one the
    audit's fake tensors stand for (the accelerator's). Not the fake "cuda:0" of device="cuda": a model's tensors
    would then sit on two fake devices, its inputs (made as docs/model-files.md shows, without device=) on one and
    its state on the other, and the trace would hold copies between them that a GPU run never makes (llama3's
    `self.cache_k.to(xq)`) or fail on mixed devices; and the backward of fake CUDA tensors aborts a CPU-only torch
    (autograd's device threads ask for a CUDA device guard). An index-less CUDA default device (set by the model)
    is cuda:0, as fake tensors have it: `.to()` without an index would initialize CUDA."""
    if not isinstance(device, int) and device is not None and torch.device(device).type != "cuda":
        raise RuntimeError(f"Invalid device, must be cuda device (received {device})")  # torch's own words
    get = getattr(torch, "get_default_device", None)  # torch 2.3 and later
    default = get() if get is not None else torch.device("cpu")
    return torch.device("cuda", 0) if default.type == "cuda" and default.index is None else default


def _caller() -> str | None:
    """'model.py:136': the innermost frame of the model's code (outside torch, npuport and installed libraries)."""
    frame = sys._getframe(3)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith((_TORCH_DIR, _NPUPORT_DIR)) and "site-packages" not in name:
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def cuda_note(sites: list[str]) -> str:
    named = ", ".join(sites[:_SITES_NAMED]) + (f" and {len(sites) - _SITES_NAMED} more" if len(sites) > _SITES_NAMED else "")
    return (f".cuda() or a CUDA device in the model's code ({named}): traced as a move to the device the audit models, where tensors "
            "made without device= are (no GPU is needed; torch.cuda.is_available() is left as it is); on an Ascend "
            "NPU it is .npu() or .to(device) (finding NPS003 of npuport migrate)")


class Compiled:
    """Whether torch.compile'd code ran while Dynamo was off (`met`: one such function at least)."""

    met = False


@contextlib.contextmanager
def compiled_as_eager(active: bool = True) -> Iterator[Compiled]:
    """Dynamo off for the span (`active`): a torch.compile'd function runs its Python eagerly, on fake tensors as on
    real ones. Dynamo's setting is restored on the way out."""
    out = Compiled()
    if not active:
        yield out
        return
    import torch._dynamo  # noqa: PLC0415 - FakeTensorMode has loaded it already; kept off this module's import

    before = _frames_met()
    try:
        with torch._dynamo.config.patch(disable=True):
            yield out
    finally:
        out.met = _frames_met() > before


def _frames_met() -> int:
    """How many code objects Dynamo's frame callback has met in this process (it is still called with Dynamo off,
    to skip each frame of a compiled function). A private counter of torch's: without it, no note is made."""
    codes = getattr(sys.modules.get("torch._dynamo.convert_frame"), "input_codes", None)
    seen = getattr(codes, "seen", None)
    return len(seen) if isinstance(seen, list) else 0


def compiled_note(what: str) -> str:
    return (f"{what} calls torch.compile'd code: it ran eagerly (Dynamo off), since compiled code reads tensor data "
            "that fake tensors do not hold; the traced forward records eager ops either way")
