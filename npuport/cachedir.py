"""Where npuport keeps what it can rebuild at any time: $NPUPORT_CACHE_DIR, else $XDG_CACHE_HOME/npuport, else
~/.cache/npuport. Nothing a user made lives here; deleting the folder only costs the time to rebuild it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("NPUPORT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "npuport"


def write_atomic(target: Path, body: bytes, prefix: str) -> bool:
    """Write `body` to `target` through a temporary file renamed into place (a reader sees the old file or the new
    one, never half of one). Best effort: False when the cache cannot be written (a read-only home)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
            os.replace(tmp, target)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True
