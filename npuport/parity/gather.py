"""Per-rank captures gathered into one capture of global tensors, so a record made on N ranks compares entry by
entry with one made on M ranks or on one device.

Entries follow rank 0 (its keys, its order). Per entry, the ranks' tensors become one:
- a sharded tensor (a DTensor: its placement was recorded) is assembled by shards.assemble: concatenated along the
  shard dimension, summed for Partial, the first copy of a Replicate checked against the others;
- a plain tensor equal on every rank (inputs, norms before a column-parallel layer, data-parallel replicas) is rank
  0's; one that differs across ranks and records no placement (a local shard a layer returned as a plain tensor,
  `use_local_output=True`) cannot be put back together: it is left out, and said why, so that the entry shows up as
  present on one side only instead of being compared against the wrong thing;
- statistics (stats-only records): a replicated entry keeps rank 0's statistics when every rank's checksum agrees;
  a sharded one needs full records (or `--keep` of its module).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from npuport.parity.entries import Capture, Entry
from npuport.parity.shards import ShardError, assemble, layout_key
from npuport.parity.stats import StatsTable

_NOTES = 20  # replica disagreements listed one by one; the rest are counted


@dataclass
class Gathered:
    capture: Capture
    notes: list[str] = field(default_factory=list)  # replicas that should agree and do not
    left_out: dict[str, str] = field(default_factory=dict)  # entry key -> why it could not be gathered

    def warnings(self, label: str) -> list[str]:
        out = [f"{label}: {n}" for n in self.notes]
        if self.left_out:
            key, why = next(iter(self.left_out.items()))
            out.append(f"{label}: {len(self.left_out)} entries could not be gathered from the ranks and are compared as "
                       f"present on one side only; the first, {key}: {why}")
        return out


class _Builder:
    def __init__(self, parts: list[Capture]) -> None:
        self.parts = parts
        self.full: dict[int, torch.Tensor] = {}
        self.stats = StatsTable.empty()
        self.notes: list[str] = []
        self.skipped_notes = 0

    def one(self, blobs: tuple[int, ...], new: int, key: str) -> str | None:
        """Put blob `new` together from each rank's blob; the reason it cannot be, or None."""
        parts = self.parts
        metas = [p.dist.get(b) for p, b in zip(parts, blobs)]
        full = all(b in p.full for p, b in zip(parts, blobs))
        if all(m is None for m in metas):
            return self._replicated(blobs, new, full)
        if any(m is None for m in metas):
            return "a sharded tensor on some ranks, a plain one on others"
        if len({layout_key(m) for m in metas}) > 1:
            return "its placement differs across ranks"
        meta = metas[0]
        assert meta is not None
        if not full:
            if all(p == "Replicate()" for p in meta["placements"]):
                return self._replicated(blobs, new, False)
            return ("sharded and recorded as statistics only (gathering a shard needs the tensors: record without "
                    "--stats-only, or --keep its module)")
        try:
            self.full[new], notes = assemble({r: p.full[b] for r, (p, b) in enumerate(zip(parts, blobs))}, meta)
        except ShardError as exc:
            return f"cannot be assembled: {exc}"
        self._note(key, notes)
        return None

    def _replicated(self, blobs: tuple[int, ...], new: int, full: bool) -> str | None:
        parts = self.parts
        if full:
            first = parts[0].full[blobs[0]]
            if all(p.full[b].shape == first.shape and torch.equal(p.full[b], first) for p, b in zip(parts[1:], blobs[1:])):
                self.full[new] = first
                return None
        else:
            sts = [p.stats_of(b) for p, b in zip(parts, blobs)]
            if all(s.checksum == sts[0].checksum and s.count == sts[0].count for s in sts[1:]):
                self.stats[new] = sts[0]
                return None
        return ("differs across ranks and records no placement (a rank's local piece: a layer that returns DTensors, "
                "e.g. use_local_output=False, can be gathered)")

    def _note(self, key: str, notes: list[str]) -> None:
        for n in notes:
            if len(self.notes) < _NOTES:
                self.notes.append(f"{key}: {n}")
            else:
                self.skipped_notes += 1


def gather(parts: list[Capture]) -> Gathered:
    """One capture from each rank's (index = rank)."""
    base = parts[0]
    keyed = [p.by_key() for p in parts]
    b = _Builder(parts)
    made: dict[tuple[int, ...], int | str] = {}
    rank0: dict[int, int] = {}  # rank 0's blob -> the gathered blob (the replayable calls point at blobs)
    entries: list[Entry] = []
    left: dict[str, str] = {}
    for e in base.entries:
        found = [k.get(e.key) for k in keyed]
        absent = [r for r, x in enumerate(found) if x is None]
        if absent:
            left[e.key] = f"absent on rank {', '.join(map(str, absent))}"
            continue
        blobs = tuple(x.blob for x in found if x is not None)
        if blobs not in made:
            new = len(made)
            why = b.one(blobs, new, e.key)
            made[blobs] = why if why is not None else new
        got = made[blobs]
        if isinstance(got, str):
            left[e.key] = got
            continue
        rank0.setdefault(e.blob, got)
        entries.append(e._replace(blob=got))
    calls = {ck: {"spec": c["spec"], "blobs": [rank0.get(x, -1) for x in c["blobs"]]} for ck, c in base.calls.items()}
    warns = list(dict.fromkeys(w for p in parts for w in p.warnings))
    cap = Capture(base.mode, entries, b.full, b.stats, calls, list(base.module_sequence), base.op_sequence, warns,
                  stats_kernels=set().union(*(p.stats_kernels for p in parts)))
    notes = b.notes + ([f"{b.skipped_notes} more replica disagreements"] if b.skipped_notes else [])
    return Gathered(cap, notes, left)
