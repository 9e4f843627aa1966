"""torchrun's environment read (npuport.parity.procgroup): ranks, devices per rank, backends, one-line errors."""

from __future__ import annotations

import pytest

from npuport.errors import NpuportError
from npuport.parity.procgroup import backend_for, process_group, rank_device, torchrun_env


def test_no_torchrun_variables_means_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert torchrun_env() is None
    with process_group("cpu") as pg:
        assert pg is None


def test_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert torchrun_env() == (3, 4, 1)


@pytest.mark.parametrize("env, needle", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "are set but not integers"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK must lie in 0 .. WORLD_SIZE - 1"),
])
def test_bad_variables_are_one_line_errors(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], needle: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(NpuportError, match=needle):
        torchrun_env()


def test_missing_master_address_is_refused_before_any_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(NpuportError, match="MASTER_ADDR and MASTER_PORT are not"):
        with process_group("cpu"):
            pass


def test_one_device_per_rank_and_the_backend_of_its_kind() -> None:
    assert rank_device("cuda", 3) == "cuda:3" and rank_device("npu", 1) == "npu:1"
    assert rank_device("cuda:0", 3) == "cuda:0" and rank_device("cpu", 3) == "cpu"
    assert [backend_for(d) for d in ("cpu", "cuda:1", "npu:0")] == ["gloo", "nccl", "hccl"]
    with pytest.raises(NpuportError, match="no process-group backend for device type 'meta'"):
        backend_for("meta")
