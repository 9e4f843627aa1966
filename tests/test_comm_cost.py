"""Collective time on link models (npuport/cost/comm.py): each formula against its hand calculation, written out
below from the HCCL algorithm docs (hicann/hccl docs/zh/user_guide/coll_algo_intro) and nccl-tests'
doc/PERFORMANCE.md; two levels against one; bus bandwidth against the nccl-tests factors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from npuport import mappings
from npuport.cost import comm
from npuport.cost.comm import Level, LinkSystem
from npuport.cost.roofline import load_chips
from npuport.errors import MappingError, NpuportError

GB = 1e9
A, B, G = 2e-6, 1 / (100 * GB), 1 / (1000 * GB)  # alpha, beta (100 GB/s), gamma (1 TB/s of reduction)


def test_ring_formulas() -> None:
    n, p = 8e9, 8
    # all-reduce: 2(p-1)a + 2(p-1)/p n b + (p-1)/p n g = 14 x 2us + 1.75 x 80 ms + 0.875 x 8 ms
    assert comm.ring_all_reduce(n, p, A, B, G) == pytest.approx(28e-6 + 0.140 + 0.007)
    # reduce-scatter: (p-1)a + (p-1)/p n (b + g) = 14us + 0.875 x 88 ms
    assert comm.ring_reduce_scatter(n, p, A, B, G) == pytest.approx(14e-6 + 0.077)
    # all-gather: (p-1)a + (p-1)/p n b = 14us + 70 ms
    assert comm.ring_all_gather(n, p, A, B) == pytest.approx(14e-6 + 0.070)
    # broadcast, pipelined: (p-1)a + n b = 14us + 80 ms (nccl-tests: broadcast busbw = algbw)
    assert comm.ring_broadcast(n, p, A, B) == pytest.approx(14e-6 + 0.080)
    # scatter: (p-1)a + (p-1)/p n b, n the root's whole buffer
    assert comm.ring_scatter(n, p, A, B) == pytest.approx(14e-6 + 0.070)


def test_mesh_formulas_charge_one_peer_link() -> None:
    n, p, link = 8e9, 8, 1 / (56 * GB)
    # reduce-scatter: a + n/p b + (p-1)/p n g = 2us + 1e9/56e9 + 7 ms
    assert comm.mesh_reduce_scatter(n, p, A, link, G) == pytest.approx(2e-6 + 1 / 56 + 0.007)
    assert comm.mesh_all_gather(n, p, A, link) == pytest.approx(2e-6 + 1 / 56)
    # all-reduce = reduce-scatter + all-gather: 2a + 2n/p b + (p-1)/p n g
    assert comm.mesh_all_reduce(n, p, A, link, G) == pytest.approx(4e-6 + 2 / 56 + 0.007)


def test_rhd_formulas_power_of_two_and_not() -> None:
    n = 6e9
    # p = 8: 2 log2(8) a + 2 x 7/8 n b + 7/8 n g
    assert comm.rhd_all_reduce(n, 8, A, B, G) == pytest.approx(6 * A + 1.75 * n * B + 0.875 * n * G)
    # p = 6: k = 2, p' = 4: (2k+2) a + (2 x 3/4 + 2) n b + (3/4 + 1) n g
    assert comm.rhd_all_reduce(n, 6, A, B, G) == pytest.approx(6 * A + 3.5 * n * B + 1.75 * n * G)
    # reduce-scatter p = 8: log2(8) a + 7/8 n (b + g)
    assert comm.rhd_reduce_scatter(n, 8, A, B, G) == pytest.approx(3 * A + 0.875 * n * (B + G))
    # p = 6: fold (a + n(b+g)) + k = 2 halvings of ceil(6/2) + ceil(6/4) = 5 blocks of n/6 + a scatter (a + n/6 b)
    fold = A + n * (B + G)
    halvings = 2 * A + 5 * n / 6 * (B + G)
    assert comm.rhd_reduce_scatter(n, 6, A, B, G) == pytest.approx(fold + halvings + A + n / 6 * B)
    assert comm.rhd_all_gather(n, 8, A, B) == pytest.approx(3 * A + 0.875 * n * B)


def test_nvls_all_reduce() -> None:
    # every GPU sends n + n/p and receives as much: a + (p+1)/p n b
    assert comm.nvls_all_reduce(8e9, 8, A, B) == pytest.approx(A + 9 / 8 * 0.080)


UNEVEN = [[0, 10, 20], [30, 0, 40], [50, 60, 0]]


def test_all_to_all_formulas_cover_uneven_splits() -> None:
    # pairwise, step k: i -> i+k. k=1: max(n01, n12, n20) = max(10, 40, 50) = 50; k=2: max(n02, n10, n21) = 60
    assert comm.pairwise_all_to_all(UNEVEN, A, B) == pytest.approx(2 * A + 110 * B)
    # mesh: every pair at once on its own link: the largest message, 60
    assert comm.mesh_all_to_all(UNEVEN, A, B) == pytest.approx(A + 60 * B)
    # direct: the busiest injection (row sums 30, 70, 110) or reception (column sums 80, 70, 60): 110
    assert comm.direct_all_to_all(UNEVEN, A, B) == pytest.approx(A + 110 * B)
    # an even split of a 9-byte send buffer over 3 ranks: 3 bytes per pair, two pairwise steps
    assert comm.pairwise_all_to_all(comm.even_split(9, 3), A, B) == pytest.approx(2 * A + 6 * B)


@pytest.mark.parametrize("kind, factor", [
    ("all_reduce", 2 * 7 / 8), ("reduce_scatter", 7 / 8), ("all_gather", 7 / 8), ("all_to_all", 7 / 8),
    ("gather", 7 / 8), ("scatter", 7 / 8), ("broadcast", 1.0), ("reduce", 1.0), ("send", 1.0), ("recv", 1.0),
])
def test_busbw_factors_are_nccl_tests(kind: str, factor: float) -> None:
    """NVIDIA/nccl-tests doc/PERFORMANCE.md (summary list), src/gather.cu and src/alltoall.cu, for n = 8 ranks."""
    assert comm.busbw_factor(kind, 8) == pytest.approx(factor)
    assert comm.bus_bandwidth(kind, 8e9, 0.1, 8) == pytest.approx(80 * GB * factor)
    assert comm.algbw_from_busbw(kind, 80 * GB * factor, 8) == pytest.approx(80 * GB)


def test_busbw_of_a_published_h100_run() -> None:
    """nccl-tests issue 212: 8 x H100 NVLS all-reduce reaches algbw about 275 GB/s, busbw about 480 (= 275 x 14/8)."""
    assert comm.bus_bandwidth("all_reduce", 275 * GB, 1.0, 8) == pytest.approx(481.25 * GB)


def _level(topology: str, rate: float, alpha: float, algs: list[str], per: str = "rank",
           achieved: dict[str, float] | None = None) -> Level:
    return Level(topology=topology, bytes_per_s=rate, per=per, alpha_s=alpha, algorithms={"default": tuple(algs)},
                 algorithm_alpha_s={}, achieved=achieved or {}, confidence="uncertain")


def _system(intra: Level, inter: Level, hierarchy: str = "bandwidth_optimal", g: int = 4, launch: float = 0.0) -> LinkSystem:
    return LinkSystem(name="t", description="t", chips=(), library="nccl", ranks_per_node=g, hierarchy=hierarchy,
                      launch_s=launch, intra=intra, inter=inter)


def test_one_level_estimate_adds_launch_and_uses_the_measured_fraction() -> None:
    s = _system(_level("switch", 100 * GB, A, ["ring"], achieved={"ring": 0.5}), _level("switch", 10 * GB, A, ["ring"]),
                launch=5e-6)
    e = comm.collective_time("all_gather", 8e9, 4, s)
    # 5us launch + ring all-gather at half of 100 GB/s: 3a + 3/4 x 8e9 / 50e9
    assert e.seconds == pytest.approx(5e-6 + 3 * A + 0.75 * 8e9 / (50 * GB))
    assert e.steps == (("intra", "ring", pytest.approx(e.seconds - 5e-6)),) and not e.line_rate
    assert e.busbw == pytest.approx(8e9 / e.seconds * 0.75)


def test_the_fastest_candidate_algorithm_wins() -> None:
    lvl = Level(topology="switch", bytes_per_s=100 * GB, per="rank", alpha_s=1e-6,
                algorithms={"default": ("ring",), "all_reduce": ("ring", "nvls")}, algorithm_alpha_s={"nvls": 25e-6},
                achieved={}, confidence="vendor")
    s = _system(lvl, lvl, g=8)
    small, large = comm.collective_time("all_reduce", 1024, 8, s), comm.collective_time("all_reduce", 8e9, 8, s)
    assert small.steps[0][1] == "ring"  # 14 x 1us beats NVLS's 25us
    assert large.steps[0][1] == "nvls"  # 9/8 n b beats 14/8 n b
    assert large.seconds == pytest.approx(25e-6 + 9 / 8 * 8e9 / (100 * GB))


def test_mesh_on_a_switch_shares_the_rank_bandwidth_among_peers() -> None:
    s = _system(_level("switch", 100 * GB, A, ["mesh"]), _level("switch", 10 * GB, A, ["ring"]), g=8)
    # reduce-scatter a + n/p x (p-1)/B: the same bytes as a ring, one step
    assert comm.collective_time("reduce_scatter", 8e9, 8, s).seconds == pytest.approx(A + 7 / 8 * 8e9 / (100 * GB))
    mesh = _system(_level("mesh", 50 * GB, A, ["mesh"], per="link"), _level("switch", 10 * GB, A, ["ring"]), g=8)
    assert comm.collective_time("reduce_scatter", 8e9, 8, mesh).seconds == pytest.approx(A + 1e9 / (50 * GB))


def test_two_levels_equal_a_flat_ring_when_both_levels_are_alike() -> None:
    """Reduce-scatter in the node, all-reduce across on n/g, all-gather in the node moves 2(p-1)/p n per rank, as
    one ring over all p ranks: with alpha 0 and equal bandwidths the two must agree (p = 4 nodes x 4 ranks)."""
    lvl = _level("switch", 100 * GB, 0.0, ["ring"])
    two = comm.collective_time("all_reduce", 8e9, 16, _system(lvl, lvl))
    assert [step[:2] for step in two.steps] == [("intra", "ring"), ("inter", "ring"), ("intra", "ring")]
    assert two.seconds == pytest.approx(comm.ring_all_reduce(8e9, 16, 0.0, B))


def test_two_levels_beat_one_slow_ring_and_add_up_by_hand() -> None:
    s = _system(_level("switch", 100 * GB, A, ["ring"]), _level("switch", 10 * GB, 5e-6, ["ring"]))
    n, g, nodes = 8e9, 4, 2
    e = comm.collective_time("all_reduce", n, 8, s)
    rs = (g - 1) * A + (g - 1) / g * n / (100 * GB)          # 3 x 2us + 0.75 x 80 ms
    ar = 2 * (nodes - 1) * 5e-6 + 2 * (nodes - 1) / nodes * (n / g) / (10 * GB)  # 10us + 200 ms on 2 GB
    ag = rs
    assert e.seconds == pytest.approx(rs + ar + ag)
    assert e.seconds < comm.ring_all_reduce(n, 8, 5e-6, 1 / (10 * GB))  # one ring held to the 10 GB/s links
    assert e.line_rate


def test_hccl_orders_reduce_scatter_and_all_gather_across_servers_first() -> None:
    """HCCL algo_intro.md: ReduceScatter runs across servers first on the whole buffer, AllGather last on it."""
    intra, inter = _level("switch", 100 * GB, 0.0, ["ring"]), _level("switch", 10 * GB, 0.0, ["ring"])
    n, g, nodes = 8e9, 4, 2
    hccl = comm.collective_time("reduce_scatter", n, 8, _system(intra, inter, "hccl"))
    assert [s[0] for s in hccl.steps] == ["inter", "intra"]
    assert hccl.seconds == pytest.approx(0.5 * n / (10 * GB) + 0.75 * (n / nodes) / (100 * GB))
    optimal = comm.collective_time("reduce_scatter", n, 8, _system(intra, inter))
    assert optimal.seconds == pytest.approx(0.75 * n / (100 * GB) + 0.5 * (n / g) / (10 * GB))
    gather = comm.collective_time("all_gather", n, 8, _system(intra, inter, "hccl"))
    assert [s[0] for s in gather.steps] == ["intra", "inter"] and gather.seconds == pytest.approx(hccl.seconds)


def test_two_level_all_to_all_even_and_uneven() -> None:
    intra, inter = _level("switch", 100 * GB, A, ["ring"]), _level("switch", 10 * GB, 5e-6, ["pairwise"])
    n, g, nodes, p = 8e9, 4, 2, 8
    e = comm.collective_time("all_to_all", n, p, _system(intra, inter, "hccl"))
    # in the server, local rank j collects what goes to local rank j anywhere: nodes x n/p = n/g per pair, pairwise
    stage1 = (g - 1) * A + (g - 1) * (n / g) / (100 * GB)
    # across, equal local ranks swap one server block: g x n/p = n/nodes per pair
    stage2 = (nodes - 1) * 5e-6 + (nodes - 1) * (n / nodes) / (10 * GB)
    assert e.seconds == pytest.approx(stage1 + stage2)
    even = comm.even_split(n, p)
    assert comm.collective_time("all_to_all", 0, p, _system(intra, inter, "hccl"), sizes=even).seconds == pytest.approx(e.seconds)
    skewed = [row[:] for row in even]
    skewed[0][7] *= 3  # rank 0 sends three times as much to rank 7 (the other node)
    assert comm.collective_time("all_to_all", 0, p, _system(intra, inter, "hccl"), sizes=skewed).seconds > e.seconds
    # bandwidth_optimal: intra and inter traffic at once, the slower counts: each rank sends n/2 off-node
    flat = comm.collective_time("all_to_all", n, p, _system(intra, inter))
    assert flat.seconds == pytest.approx(5e-6 + g * (n / p) / (10 * GB))


def test_barrier_send_recv_and_single_rank() -> None:
    s = _system(_level("mesh", 50 * GB, A, ["mesh"], per="link"), _level("switch", 10 * GB, 5e-6, ["ring"]))
    barrier = comm.collective_time("barrier", 0, 4, s)
    assert barrier.nbytes == 4 and barrier.seconds == pytest.approx(comm.mesh_all_reduce(4, 4, A, 1 / (50 * GB)))
    assert comm.collective_time("send", 1e9, 2, s).seconds == pytest.approx(A + 1e9 / (50 * GB))  # one link
    assert comm.collective_time("send", 1e9, 2, s, ranks_per_node=1).seconds == pytest.approx(5e-6 + 1e9 / (10 * GB))
    assert comm.collective_time("all_reduce", 1e9, 1, s).seconds == 0.0


def test_errors_are_user_errors() -> None:
    s = _system(_level("switch", 100 * GB, A, ["ring"]), _level("switch", 10 * GB, A, ["ring"]))
    with pytest.raises(NpuportError, match="fill whole nodes"):
        comm.collective_time("all_reduce", 1e9, 6, s)
    with pytest.raises(NpuportError, match="unknown collective kind"):
        comm.collective_time("allmagic", 1e9, 4, s)
    with pytest.raises(NpuportError, match="no nvls formula for all_gather"):
        comm.collective_time("all_gather", 1e9, 4, s, algorithm="nvls")
    with pytest.raises(NpuportError, match="no link model named"):
        comm.get_system("dgx-z9000")


def test_shipped_systems_pair_with_hardware_chips() -> None:
    chips = load_chips()
    systems = comm.load_links()
    assert {c for s in systems.values() for c in s.chips} <= set(chips)
    assert comm.system_for_chip("Ascend910B").name == "atlas-800t-a2"
    assert comm.system_for_chip("H200").name == "hgx-h200"
    assert comm.system_for_chip("A100-SXM-80GB").name == "dgx-a100"
    assert systems["atlas-900-a3-superpod"].chips == ()
    assert systems["atlas-800t-a2"].intra.confidence == "uncertain"


def test_shipped_h100_ring_all_gather_by_hand() -> None:
    """links.yaml dgx-h100: launch 6.6us, NVLink ring alpha 0.6us, 450 GB/s x measured 0.82 (nccl-tests#212)."""
    e = comm.collective_time("all_gather", 8e9, 8, "dgx-h100")
    assert e.seconds == pytest.approx(6.6e-6 + 7 * 0.6e-6 + 7 / 8 * 8e9 / (450 * GB * 0.82))
    assert e.busbw == pytest.approx(370 * GB, rel=0.01)  # the busbw that fraction was read from


def test_a_chip_links_yaml_names_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = Path(mappings.__file__).resolve().parent
    root = tmp_path / "mappings"
    shutil.copytree(shipped, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    doc = yaml.safe_load((root / "links.yaml").read_text())
    doc["systems"]["dgx-a100"]["chips"] = ["A100-PCIe-Imaginary"]
    (root / "links.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    comm.load_links.cache_clear()
    load_chips.cache_clear()
    try:
        with pytest.raises(MappingError, match="entry 'systems.dgx-a100', field 'chips': 'A100-PCIe-Imaginary'"):
            comm.load_links()
    finally:
        comm.load_links.cache_clear()
        load_chips.cache_clear()
