"""Which files in an `--emit` folder an earlier `npuport bench --emit` wrote: by name and by the script's own first
lines, so that `--force` replaces an earlier run's scripts and nothing else (the user's own files stay).

No torch here: the CLI checks the folder before anything heavy is imported.
"""

from __future__ import annotations

import re
from pathlib import Path

NAME = re.compile(r"^\d{2,}_.+\.py$")  # NN_op_shapes.py (npuport.bench.emit.script_name)
MARKER = "written by `npuport bench`"  # in the docstring's first line (npuport.bench.emit's template)


def is_emitted(path: Path) -> bool:
    """A script bench wrote: its name and its docstring say so (a user's own numbered script has no marker)."""
    if not NAME.match(path.name) or not path.is_file() or path.is_symlink():
        return False
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            return MARKER in fh.read(400)
    except OSError:
        return False


def earlier_scripts(folder: str | Path) -> list[Path]:
    """The scripts an earlier emit left in `folder`, sorted by name (none if it is not a folder)."""
    out_dir = Path(folder)
    if not out_dir.is_dir():
        return []
    return sorted(p for p in out_dir.iterdir() if is_emitted(p))
