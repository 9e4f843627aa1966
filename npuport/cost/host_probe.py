"""`--host-probe TIME`: the user's host speed (seconds per tiny eager op, as `npuport profile probe` measures it), read
from text and checked. Torch-free: the command line checks it before anything loads (npuport.cli.audit)."""

from __future__ import annotations

import re

from npuport.errors import NpuportError

# µ as the micro sign (U+00B5) and as the Greek letter mu (U+03BC): keyboards give either
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ns": 1e-9}
_VALUE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(s|ms|us|\u00b5s|\u03bcs|ns)\s*$", re.IGNORECASE)
# a probe outside this range is not a host's speed per tiny eager op: the lent hosts read 6.5-19 us, a CPU
# probe about 1 us (docs/profile.md); 0.1 us is faster than any eager dispatch, 1 ms a host stalled
RANGE = (1e-7, 1e-3)
_EXPECTED = "this host's time per tiny eager op with a unit, as `npuport profile probe` prints it: 9.3us, 0.0093ms"


def parse_host_probe(text: str) -> float:
    """'9.3us', '9.3µs', '0.0093ms', '9300ns', '9.3e-6s' -> seconds; one line (exit 2) otherwise."""
    m = _VALUE.match(text)
    if m is None:
        raise NpuportError("cannot use --host-probe", _EXPECTED, repr(text))
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not RANGE[0] <= value <= RANGE[1]:
        raise NpuportError("cannot use --host-probe", "a host probe between 0.1us and 1ms (the lent GPU hosts read "
                           "6.5-19us per tiny eager op)", text.strip() if unit_us(m.group(2)) else f"{text.strip()} = {value * 1e6:g}us")
    return value


def unit_us(unit: str) -> bool:
    return unit.lower() in ("us", "\u00b5s", "\u03bcs")


def check_host_probe(value: float | None) -> None:
    """The API's host_probe: None, or seconds per tiny eager op within RANGE."""
    if value is not None and (isinstance(value, bool) or not RANGE[0] <= value <= RANGE[1]):
        raise NpuportError("cannot use host_probe", "seconds per tiny eager op between 1e-7 and 1e-3", repr(value))
