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
and parallel filesystems), so a write within that tick after the hash could keep the identity. A stamp therefore
counts only when it was taken at least one racy window after the file last changed; a stamp taken sooner is
rewritten by the next load, which hashes again. The window follows the file's own timestamps: one with a sub-second
part lives on a filesystem that keeps sub-second times (ext4, XFS, btrfs, tmpfs keep nanosecond fields at the
kernel tick's resolution, 1-10 ms; exFAT 10 ms), whose window is FINE_RACY_S; whole-second times (FAT, ext3, HFS+,
filesystems and network mounts that keep seconds; or, rarely, a fine one that landed on a whole second) take
RACY_S. So the recorder's own stamp of a file it wrote counts once its hash took longer than FINE_RACY_S, which is
every file large enough for hashing to matter. Mode "always" (`parity compare --verify always`) hashes every time: for media that can
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
from collections.abc import Iterator
from pathlib import Path

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
    """True when mode is `once` and `path` matched `sha256` here with the identity it still has."""
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
    changed = max(ident["mtime_ns"], ident["ctime_ns"])
    return isinstance(stamp.get("stamped_ns"), int) and stamp["stamped_ns"] - changed >= racy_window_s(ident) * 1e9


def racy_window_s(ident: dict[str, int]) -> float:
    """How long after a file's last change a stamp of it counts: FINE_RACY_S when its times have a sub-second part
    (its filesystem keeps them), else RACY_S."""
    second = 1_000_000_000
    return FINE_RACY_S if ident["mtime_ns"] % second or ident["ctime_ns"] % second else RACY_S


def stamp(path: Path, sha256: str) -> None:
    """Record that `path`, as it is now, matched `sha256`. Best effort: a cache that cannot be written is skipped."""
    ident = _identity(path)
    if ident is None:
        return
    target = _stamp_path(ident)
    body = json.dumps({"sha256": sha256, "identity": ident, "stamped_ns": time.time_ns()})
    write_atomic(target, body.encode(), ".stamp-")  # no cache: every load hashes
