"""Which record files this machine has already checked against their manifest's sha256.

A record's files are checked against the sha256 their manifest lists before anything in them is trusted. sha256 runs
at about 1 GB/s per core on the project's CPU machine, as fast as the comparison itself, so checking both sides on
every compare halved its speed (docs/performance.md). The check is what matters, not repeating it: once a file has
matched its hash here (a load hashed it, or the recorder that wrote it hashed it on disk), a stamp records the file's
identity as the filesystem reports it (device, inode, size, and the modification and status-change times in ns) with
the hash it matched; a later load whose file still has that identity and whose manifest lists the same hash skips the
hashing. A copied, rewritten, touched or `utime`-reset file
has a new identity (any write or attribute change moves its ctime) and is hashed again, the way git's index and
rsync's quick check trust a file's stat.

The one gap, as in git ("racy git"): timestamps have a granularity (a kernel tick locally, a second on some network
and parallel filesystems), so a write within that tick after the file's last change keeps its identity. So the
identity is read before the hash and again after it, and a file that changed meanwhile is not stamped; and a stamp
counts only when its hash *started* at least one racy window after the file's last change (a write during the hash
would then have moved the times). The window follows the file's own timestamps: one with a sub-second part lives on
a filesystem that keeps sub-second times (ext4, XFS, btrfs, tmpfs keep nanosecond fields at the kernel tick's
resolution, 1-10 ms; exFAT 10 ms), whose window is FINE_RACY_S; whole-second times (FAT, ext3, HFS+, filesystems
and network mounts that keep seconds; or, rarely, a fine one that landed on a whole second) take RACY_S. The
recorder's own stamps (`own`) are of files it has just written in its private staging folder, which no one else
writes: on a filesystem with sub-second times they count as soon as the file kept its identity over the hash, so
the first compare on the machine that recorded both sides hashes nothing; on a coarse one they wait RACY_S like any
stamp. Times are compared with this machine's clock: on a network mount whose server clock runs behind, a stamp
could count early by the skew.
Mode "always" (`parity compare --verify always`) hashes every time: for media that can
rot in place without a write.

Stamps live under $NPUPORT_CACHE_DIR, else $XDG_CACHE_HOME/npuport, else ~/.cache/npuport (`verified/`), one small
JSON file per stamped file (named by its device and inode); the record's own folder is never written by a load.
Where the cache cannot be written (a read-only home), nothing is stamped and every load hashes, as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from npuport.cachedir import cache_dir, write_atomic

MODES = ("once", "always")
RACY_S = 2.0  # the coarsest common timestamp granularity (FAT's 2 s; Lustre and some NFS setups keep seconds)
FINE_RACY_S = 0.05  # five ticks of the coarsest sub-second resolution above (exFAT's 10 ms; a 100 Hz kernel's tick)
_mode: contextvars.ContextVar[str] = contextvars.ContextVar("npuport_verify_mode", default="once")


@contextlib.contextmanager
def verification(mode: str) -> Iterator[None]:
    """Within the block, record files are hashed `once` per identity (the default) or `always`."""
    if mode not in MODES:
        raise ValueError(f"verification mode {mode!r}: expected one of {', '.join(MODES)}")
    token = _mode.set(mode)
    try:
        yield
    finally:
        _mode.reset(token)


def _identity(path: Path) -> dict[str, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return {"dev": st.st_dev, "ino": st.st_ino, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


def _stamp_path(ident: dict[str, int]) -> Path:
    # keyed by the file itself, not its path: `parity record` writes into a staging folder renamed into place
    return cache_dir() / "verified" / f"{ident['dev']:x}-{ident['ino']:x}.json"


def already_verified(path: Path, sha256: str) -> bool:
    """True when mode is `once` and `path` matched `sha256` here with the identity it still has (see the module doc
    for when a stamp counts)."""
    if _mode.get() != "once":
        return False
    ident = _identity(path)
    if ident is None:
        return False
    try:
        stamp = json.loads(_stamp_path(ident).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not (isinstance(stamp, dict) and stamp.get("sha256") == sha256 and stamp.get("identity") == ident):
        return False
    window = racy_window_s(ident)
    if stamp.get("own") is True and window == FINE_RACY_S:
        return True  # the recorder's own new file, unchanged over its hash, where times have sub-second resolution
    changed = max(ident["mtime_ns"], ident["ctime_ns"])
    started = stamp.get("hashed_from_ns")
    return isinstance(started, int) and started - changed >= window * 1e9


def racy_window_s(ident: dict[str, int]) -> float:
    """How long after a file's last change a hash must have started for its stamp to count: FINE_RACY_S when the
    file's times have a sub-second part (its filesystem keeps them), else RACY_S."""
    second = 1_000_000_000
    return FINE_RACY_S if ident["mtime_ns"] % second or ident["ctime_ns"] % second else RACY_S


class Hashed(NamedTuple):
    digest: str
    identity: dict[str, int] | None  # the file's identity before the hash, None when it changed while hashed
    started_ns: int


def hashed(path: Path, digest: Callable[[Path], str]) -> Hashed:
    """`digest(path)`, with the file's identity read before and after: a file that changed while it was hashed
    (a copy still being written, an edit) has no identity to stamp."""
    before = _identity(path)
    started = time.time_ns()
    value = digest(path)
    return Hashed(value, before if before is not None and _identity(path) == before else None, started)


def stamp_hashed(path: Path, h: Hashed, own: bool = False) -> None:
    """Record that `path` matched `h.digest` (it did, and its manifest lists that digest). `own`: the recorder hashed a
    file it had just written into its private staging folder, which nobody else writes."""
    if h.identity is not None:
        _write(h.identity, h.digest, h.started_ns, own)


def stamp(path: Path, sha256: str) -> None:
    """Record that `path`, as it is now, matched `sha256`, hashed from now (tests and tools that hashed it
    themselves; loads use hashed / stamp_hashed)."""
    ident = _identity(path)
    if ident is not None:
        _write(ident, sha256, time.time_ns(), False)


def _write(ident: dict[str, int], sha256: str, started_ns: int, own: bool) -> None:
    """Best effort: a cache that cannot be written is skipped (every load then hashes)."""
    body = json.dumps({"sha256": sha256, "identity": ident, "hashed_from_ns": started_ns, "own": own,
                       "stamped_ns": time.time_ns()})
    write_atomic(_stamp_path(ident), body.encode(), ".stamp-")
