"""The process group a record runs in under torchrun: found (the user's model file or program made one), or made
from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and destroyed afterwards.

The backend follows the device the record runs on: gloo for the CPU (and the CPU-backed NPU stand-in), nccl for
CUDA, hccl for Ascend. A bare `cuda` / `npu` becomes `cuda:LOCAL_RANK` / `npu:LOCAL_RANK`, one device per rank, as
torchrun expects. Ranks agree on outcomes through one small all_gather of a flag (`failed_ranks`), so a rank that
fails never leaves the others waiting in a barrier: every rank learns which ranks failed and stops.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist

from npuport.errors import NpuportError

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
LAUNCH = "torchrun --nproc-per-node N $(which npuport) parity record ..."


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    created: bool  # npuport initialised the group (and destroys it); False: the model or the caller did
    torch_device: str  # where this rank's flag tensors live (the backend's device)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "world_size": self.world_size, "local_rank": self.local_rank, "backend": self.backend,
                "process_group": "npuport" if self.created else "existing", "host": socket.gethostname()}

    def failed_ranks(self, ok: bool) -> list[int]:
        """Every rank says whether its step worked; all learn which did not (a collective: all ranks call it)."""
        flag = torch.tensor([0 if ok else 1], dtype=torch.int64, device=self.torch_device)
        flags = [torch.zeros_like(flag) for _ in range(self.world_size)]
        _settle(dist.all_gather(flags, flag, async_op=True))
        return [r for r, f in enumerate(flags) if int(f.item())]

    def token(self) -> int:
        """A random number rank 0 draws and every rank receives: names the folder the ranks share for one record."""
        t = torch.tensor([secrets.randbits(48) if self.rank == 0 else 0], dtype=torch.int64, device=self.torch_device)
        _settle(dist.broadcast(t, src=0, async_op=True))
        return int(t.item())


_HELD: collections.deque[Any] = collections.deque(maxlen=16)


def _settle(work: Any) -> None:
    """Wait for a collective and keep its work object. Why keep it: gloo's worker thread drops its reference to a
    finished work a moment after wait() returns; when that is the last reference, the work's tensors are freed on
    the worker thread, which takes the GIL, and during interpreter exit that aborts the process ("terminate called
    without an active exception"; gdb: ~AsyncAllgatherWork -> decref_pyobject -> take_gil -> pthread_exit). Seen
    about once in ten runs at world size 4 when a record ended with a collective; none in 40 with the work held."""
    work.wait()
    _HELD.append(work)


def torchrun_env() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when torchrun's variables are set; None when neither RANK nor WORLD_SIZE is."""
    env = os.environ
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    try:
        rank, world = int(env.get("RANK", "")), int(env.get("WORLD_SIZE", ""))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise NpuportError("RANK / WORLD_SIZE / LOCAL_RANK are set but not integers", f"the variables torchrun sets ({LAUNCH})",
                           f"RANK={env.get('RANK')!r} WORLD_SIZE={env.get('WORLD_SIZE')!r} LOCAL_RANK={env.get('LOCAL_RANK')!r}") from None
    if not 0 <= rank < world:
        raise NpuportError("RANK must lie in 0 .. WORLD_SIZE - 1", f"the variables torchrun sets ({LAUNCH})",
                           f"RANK={rank} WORLD_SIZE={world}")
    return rank, world, local


def under_torchrun() -> bool:
    return torchrun_env() is not None or (dist.is_available() and dist.is_initialized())


def rank_device(spec: str, local_rank: int) -> str:
    """`cuda` -> `cuda:LOCAL_RANK` (and npu): one device per rank; an explicit index is the user's choice."""
    return f"{spec}:{local_rank}" if spec.strip() in ("cuda", "npu") else spec


def _kind(torch_device: str) -> str:
    return torch_device.partition(":")[0]  # not torch.device(): "npu" parses only once torch_npu is imported


def backend_for(torch_device: str) -> str:
    kind = _kind(torch_device)
    if kind not in BACKENDS:
        raise NpuportError(f"no process-group backend for device type {kind!r}", "cpu (gloo), cuda (nccl) or npu (hccl)", torch_device)
    return BACKENDS[kind]


@contextlib.contextmanager
def process_group(torch_device: str) -> Iterator[RankInfo | None]:
    """The group to record in, or None outside torchrun. Made here only if torchrun's variables say so and none
    exists yet; destroyed on exit only if made here."""
    if not dist.is_available():
        yield None
        return
    if dist.is_initialized():
        env = torchrun_env()
        yield RankInfo(dist.get_rank(), dist.get_world_size(), env[2] if env else dist.get_rank(), str(dist.get_backend()),
                       False, _flag_device(str(dist.get_backend()), torch_device))
        return
    env = torchrun_env()
    if env is None:
        yield None
        return
    rank, world, local = env
    backend = backend_for(torch_device)
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise NpuportError(f"RANK and WORLD_SIZE are set but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not",
                           f"a launch through torchrun ({LAUNCH})", f"RANK={rank} WORLD_SIZE={world}")
    if _kind(torch_device) != "cpu":
        torch.accelerator.set_device_index(int(torch_device.partition(":")[2] or 0))
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    try:
        yield RankInfo(rank, world, local, backend, True, _flag_device(backend, torch_device))
    finally:
        gc.collect()  # the model's DTensors and their collectives' work objects go on this thread, not gloo's (_settle)
        dist.destroy_process_group()


def _flag_device(backend: str, torch_device: str) -> str:
    """gloo reduces host tensors; nccl / hccl need the accelerator's."""
    if "gloo" in backend:
        return "cpu"
    if _kind(torch_device) != "cpu":
        return torch_device
    acc = torch.accelerator.current_accelerator()
    return f"{acc.type}:{torch.accelerator.current_device_index()}" if acc is not None else "cpu"
