"""What a CPU fallback costs and how to forbid it.

torch_npu's backend fallback (npu_cpu_fallback) copies an unsupported op's tensors to the host, runs the CPU
kernel and copies the results back; the estimate here is the time those bytes take on the host link.
"""

from __future__ import annotations

from npuport.coverage.database import available_versions, load, published_versions, releases, version_key
from npuport.errors import NpuportError
from npuport.mappings import load_checked

# Read by libtorch_npu.so from torch_npu 2.13.0 on, and by the post releases of older lines built with it
# (2.7.1.post11, 2.9.0.post9, 2.10.0.post7, 2.11.0.post3, 2.12.0.post3); the sync script records per release
# whether the library contains it (`fallback_error_env` in each coverage file); =1 makes every CPU fallback raise.
FALLBACK_ERROR_ENV = "TORCH_NPU_FALLBACK_CPU_DISABLE"
_LINK_FILE = "coverage/host_link.yaml"


def _links() -> tuple[str, dict[str, float]]:
    doc = load_checked(_LINK_FILE)  # fields and types: schemas/coverage.host_link.schema.json
    rates: dict[str, float] = {}
    for name, link in doc["links"].items():
        rates[str(name)] = float(link["bytes_per_s"])
    if doc["default"] not in rates:
        raise NpuportError(f"{_LINK_FILE}: default link {doc['default']!r} is not under links", ", ".join(rates))
    return doc["default"], rates


def link_rate(name: str | None = None) -> float:
    """Bytes per second of a named host link from mappings/coverage/host_link.yaml (default: its `default`)."""
    default, rates = _links()
    key = name or default
    if key not in rates:
        raise NpuportError(f"unknown host link {key!r}", "one of " + ", ".join(sorted(rates)), key)
    return rates[key]


def fallback_cost_s(bytes_moved: int, link_bytes_per_s: float | None = None) -> float:
    """Seconds for `bytes_moved` (inputs device->host plus outputs host->device) to cross the host link.

    A lower bound: the link's theoretical rate, no synchronisation or CPU compute time.
    """
    rate = link_rate() if link_bytes_per_s is None else float(link_bytes_per_s)
    if rate <= 0:
        raise NpuportError("host link rate must be positive", "bytes per second > 0", str(link_bytes_per_s))
    return max(int(bytes_moved), 0) / rate


def first_release_with_switch() -> str | None:
    """The oldest release line whose first release reads FALLBACK_ERROR_ENV ("2.13.0"): post and pre-releases
    do not count here, since torch_npu backported the switch to post releases of older lines (releases_with_switch
    lists every release that has it)."""
    for version in available_versions():
        key = version_key(version)
        if key[2] == -1 and key[1] == 10**9 and load(version).fallback_error_env == FALLBACK_ERROR_ENV:
            return version
    return None


def releases_with_switch() -> list[str]:
    """Every release with data (aliases included) whose library reads FALLBACK_ERROR_ENV, oldest version first."""
    known = releases()
    with_switch = {v for v in available_versions() if load(v).fallback_error_env == FALLBACK_ERROR_ENV}
    return [v for v in published_versions() if known[v].data in with_switch]
