"""Record files hashed once per file identity (npuport.parity.verified): what is trusted, what is hashed again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from npuport.errors import NpuportError
from npuport.parity import artifact as art
from npuport.parity import verified

from .test_artifact import _synthetic


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = art._sha256
    monkeypatch.setattr(art, "_sha256", lambda p: calls.append(p.name) or real(p))
    return calls


def test_stamp_is_trusted_only_for_the_same_file_and_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc" * 1000)
    verified.stamp(f, "h1")
    assert not verified.already_verified(f, "h1")  # stamped within the racy window of the file's change: hashed again
    later = f.stat().st_ctime_ns + int(3e9)
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: later)  # a stamp taken 3 s after the file's change
        verified.stamp(f, "h1")
    assert verified.already_verified(f, "h1")
    assert not verified.already_verified(f, "h2")  # the manifest lists another hash
    with verified.verification("always"):
        assert not verified.already_verified(f, "h1")
    f.write_bytes(b"abd" * 1000)  # same size, rewritten in place: ctime moves
    assert not verified.already_verified(f, "h1")
    with pytest.raises(ValueError):
        with verified.verification("sometimes"):
            pass


def test_second_compare_does_not_hash_and_a_changed_file_is_caught(tmp_path: Path, hashed: list[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = _synthetic(tmp_path, "r", {0: torch.ones(64), 1: torch.arange(64.0)})
    tensors = path / "tensors.safetensors"
    _forget(tensors)  # no recorder's stamp: as a record copied here from another machine
    hashed.clear()
    art.load_artifact(path)
    assert "tensors.safetensors" in hashed  # first load: hashed (and its stamp, started right after the change, racy)
    hashed.clear()
    art.load_artifact(path)
    assert "tensors.safetensors" in hashed
    now = time.time_ns()
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: now + int(5e9))  # the stamps of a load made 5 s after the record
        art.load_artifact(path)
    hashed.clear()
    art.load_artifact(path)
    assert hashed == []  # unchanged since a non-racy stamp: trusted
    with verified.verification("always"):
        art.load_artifact(path)
    assert "tensors.safetensors" in hashed
    # corrupted in place, same size, even with its mtime put back: the ctime moved, so it is hashed and refused
    st = tensors.stat()
    data = bytearray(tensors.read_bytes())
    data[-3] ^= 0xFF
    tensors.write_bytes(bytes(data))
    os.utime(tensors, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(NpuportError, match="corrupt: tensors.safetensors does not match its hash"):
        art.load_artifact(path)


def _forget(path: Path) -> None:
    st = path.stat()
    (verified.cache_dir() / "verified" / f"{st.st_dev:x}-{st.st_ino:x}.json").unlink(missing_ok=True)


def test_the_recorders_own_stamp_counts_at_once_where_times_are_fine_grained(tmp_path: Path, hashed: list[str]) -> None:
    """The recorder hashed each file it had just written into its private staging folder, and the file kept its
    identity over that hash: on a filesystem with sub-second times the first compare here does not hash it again."""
    path = _synthetic(tmp_path, "r", {0: torch.ones(64)})
    st = (path / "tensors.safetensors").stat()
    if verified.racy_window_s({"mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}) != verified.FINE_RACY_S:
        pytest.skip("this filesystem keeps whole-second times")
    hashed.clear()
    art.load_artifact(path)
    assert hashed == []


def test_a_file_that_changes_while_it_is_hashed_is_not_stamped(tmp_path: Path) -> None:
    """A write during the hash (a copy still arriving, an edit) must not leave the new identity stamped with the old
    digest, however long after the previous change the hash started."""
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc" * 1000)
    os.utime(f, ns=(10**9, 10**9))  # last written long ago: the write below moves the mtime, in whatever tick it lands

    def digest_then_write(path: Path) -> str:
        d = art._sha256(path)
        with path.open("r+b") as fh:  # same size, rewritten in place while "hashing"
            fh.write(b"zzz")
        return d

    h = verified.hashed(f, digest_then_write)
    assert h.identity is None
    verified.stamp_hashed(f, h)
    assert not verified.already_verified(f, h.digest)
    h2 = verified.hashed(f, art._sha256)
    assert h2.identity is not None and h2.digest != h.digest


def test_a_record_hashed_long_after_its_write_is_not_hashed_again(tmp_path: Path, hashed: list[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorder hashes each file it writes; when that hash ended RACY_S after the write (a large file), its stamp
    lets the first compare on this machine skip the hash."""
    now = time.time_ns()
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: now + int(5e9))  # the recorder's hash and stamp, 5 s after the write
        path = _synthetic(tmp_path, "r", {0: torch.ones(64)})
    hashed.clear()
    art.load_artifact(path)
    assert hashed == []
    (path / "tensors.safetensors").chmod(0o600)  # any change since (here its mode: the ctime moves): hashed again
    art.load_artifact(path)
    assert "tensors.safetensors" in hashed


def test_unwritable_cache_hashes_every_time(tmp_path: Path, hashed: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("NPUPORT_CACHE_DIR", str(blocker))
    path = _synthetic(tmp_path, "r", {0: torch.ones(8)})
    for _ in range(2):
        hashed.clear()
        art.load_artifact(path)
        assert "tensors.safetensors" in hashed


def test_mode_reaches_the_threads_that_load_both_sides(llama_config: str, tmp_path: Path, hashed: list[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two records load in parallel threads: `--verify always` must hash there too, `once` must trust stamps there."""
    from npuport.parity.entries import CaptureOptions
    from npuport.parity.run import record, run_parity
    from npuport.parity.session import RunOptions, Target

    from .conftest import SCEN
    ref = Path(record(Target(hf_config=llama_config), "cpu", RunOptions(scenario=SCEN, capture=CaptureOptions()),
                      str(tmp_path / "ref")))
    now = time.time_ns()
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: now + int(5e9))  # stamps taken 5 s after the record was written
        assert run_parity(str(ref), str(ref), None, RunOptions())
    hashed.clear()
    assert run_parity(str(ref), str(ref), None, RunOptions())
    assert hashed == []
    with verified.verification("always"):
        assert run_parity(str(ref), str(ref), None, RunOptions())
    assert hashed.count("tensors.safetensors") == 2  # both sides, each in its loading thread


def test_the_racy_window_follows_the_filesystems_timestamp_resolution(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Sub-second times (this machine's filesystem keeps them): a stamp 0.2 s after the change counts; whole-second
    times (a filesystem that keeps seconds) need RACY_S."""
    second = 1_000_000_000
    assert verified.racy_window_s({"mtime_ns": 5 * second + 123, "ctime_ns": 5 * second + 123}) == verified.FINE_RACY_S
    assert verified.racy_window_s({"mtime_ns": 5 * second, "ctime_ns": 6 * second}) == verified.RACY_S
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc" * 1000)
    st = f.stat()
    if not (st.st_mtime_ns % second or st.st_ctime_ns % second):
        pytest.skip("this filesystem keeps whole-second times")
    later = max(st.st_mtime_ns, st.st_ctime_ns) + int(0.2e9)
    with monkeypatch.context() as m:
        m.setattr(time, "time_ns", lambda: later)
        verified.stamp(f, "h1")
    assert verified.already_verified(f, "h1")
    with monkeypatch.context() as m:  # the same file seen with whole-second times: 0.2 s is not enough
        real = verified._identity
        m.setattr(verified, "_identity", lambda p: {**real(p), "mtime_ns": 5 * second, "ctime_ns": 5 * second})
        m.setattr(time, "time_ns", lambda: 5 * second + int(0.2e9))
        verified.stamp(f, "h1")
        assert not verified.already_verified(f, "h1")
        m.setattr(time, "time_ns", lambda: 5 * second + int(2.5e9))
        verified.stamp(f, "h1")
        assert verified.already_verified(f, "h1")
