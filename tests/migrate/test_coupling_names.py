"""mappings/migrate.yaml says what each torch.cuda call does where CUDA is absent (`without_cuda`: raises, answers,
ignored): the ground its hold-back decisions stand on, since torch_npu runs on the CPU build of torch. Checked here
against the installed torch, which nobody here wrote; on a machine with CUDA the facts cannot be seen, so it skips."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest

from npuport.mappings import load_checked

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the facts are about a torch without CUDA")

# arguments the calls need (a device index, a size, a state); the rest take none
ARGS: dict[str, tuple[Any, ...]] = {
    "set_device": (0,), "device": (0,), "can_device_access_peer": (0, 1), "set_sync_debug_mode": (0,),
    "manual_seed": (0,), "manual_seed_all": (0,), "caching_allocator_alloc": (16,), "caching_allocator_delete": (0,),
    "set_per_process_memory_fraction": (0.5,), "change_current_allocator": (None,), "use_mem_pool": (None,),
    "device_of": (torch.zeros(1),), "set_rng_state": (torch.zeros(16, dtype=torch.uint8),),
    "set_rng_state_all": ([torch.zeros(16, dtype=torch.uint8)],),
}
# the edits decided by diagnostic id: what their originals do
IDS: dict[str, list[Callable[[], Any]]] = {
    "NPS003": [lambda: torch.zeros(1).cuda()],
    "NPS006": [lambda: torch.zeros(1).is_cuda],
    "NPS030": [lambda: torch.cuda.amp.GradScaler().is_enabled(), lambda: torch.cuda.amp.autocast()._enabled],
    "NPS040": [lambda: torch.cuda.CUDAGraph()],
    "NPS041": [lambda: torch.cuda.Stream(), lambda: torch.cuda.Event(), lambda: torch.cuda.current_stream()],
    "NPS051": [lambda: torch.cuda.get_device_properties(0)],
}


def _what(call: Callable[[], Any]) -> str:
    """raises / answers (a value: a no-CUDA answer) / ignored (None, or a context manager entered and left)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecations and "CUDA is not available. Disabling."
        try:
            out = call()
            if hasattr(out, "__enter__") and hasattr(out, "__exit__"):
                with out:
                    return "ignored"
        except Exception:  # any exception is the fact being checked: a stop where torch.npu's goes on
            return "raises"
    return "ignored" if out is None else "answers"


def _names() -> list[tuple[str, str]]:
    data = load_checked("migrate.yaml")
    entries = {**data["coupled"]["cuda_names"], **data["independent"]}
    return sorted((name, e["without_cuda"]) for name, e in entries.items() if "without_cuda" in e)


@pytest.mark.parametrize("name, stated", _names())
def test_what_each_torch_cuda_call_does_without_cuda(name: str, stated: str) -> None:
    assert _what(lambda: getattr(torch.cuda, name)(*ARGS.get(name, ()))) == stated


@pytest.mark.parametrize("did", sorted(IDS))
def test_what_the_originals_of_coupled_ids_do_without_cuda(did: str) -> None:
    stated = load_checked("migrate.yaml")["coupled"]["ids"][did]["without_cuda"]
    assert {_what(call) for call in IDS[did]} == {stated}


def test_amp_disables_itself_without_cuda() -> None:
    """What NPS030's `answers` means: a scaler and an autocast that are off, where torch.npu.amp's would be on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.cuda.amp.GradScaler().is_enabled() is False
        assert torch.autocast("cuda")._enabled is False and torch.cuda.amp.autocast()._enabled is False


def test_every_rewritten_name_states_it_except_the_submodules() -> None:
    data = load_checked("migrate.yaml")
    entries = {**data["coupled"]["cuda_names"], **data["independent"]}
    assert sorted(n for n, e in entries.items() if "without_cuda" not in e) == ["memory", "random"]
    assert all("without_cuda" in e for e in data["coupled"]["ids"].values())
