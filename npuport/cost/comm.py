"""How long one collective takes on a link model (mappings/links.yaml), and its nccl-tests bus bandwidth.

The model is Hockney's alpha-beta(-gamma): a step costs alpha, a byte beta = 1 / bandwidth, a reduced byte gamma.
The formulas are the ones HCCL documents for its algorithms (hicann/hccl docs/zh/user_guide/coll_algo_intro: Ring,
Mesh, RHD, Pairwise), plus NVLink SHARP for NVIDIA's all-reduce and a direct (switch-bound) all-to-all. Sizes follow
nccl-tests (NVIDIA/nccl-tests doc/PERFORMANCE.md): `nbytes` is the all-reduce / broadcast / reduce / send buffer,
the whole reduce-scatter input, the whole all-gather / gather output, the scatter input at the root, and each rank's
all-to-all send buffer. So `bus_bandwidth(kind, nbytes, seconds, ranks)` compares with nccl-tests' busbw column and,
after the same factor, with hccl_test's alg_bandwidth.

A group larger than a node runs in two levels (HCCL algo_intro.md "分级通信"): for all-reduce, reduce-scatter inside
each node, the all-reduce across nodes on 1/ranks_per_node of the buffer, all-gather inside. Estimates are lower
bounds wherever a level has no measured fraction of its line rate (`CommEstimate.line_rate`). Pure functions; the
only file read is links.yaml (and hardware.yaml to check chip names).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from npuport.cost.roofline import load_chips
from npuport.errors import MappingError, NpuportError
from npuport.mappings import load_checked

_FILE = "links.yaml"
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "scatter", "gather",
         "send_recv", "barrier")
_ALIASES = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
            "alltoall": "all_to_all", "send": "send_recv", "recv": "send_recv", "sendrecv": "send_recv"}
_REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})
BARRIER_BYTES = 4  # a barrier is a one-element float32 all-reduce (ProcessGroupHCCL::barrier, as ProcessGroupNCCL)
Matrix = Sequence[Sequence[float]]  # bytes[i][j] rank i sends to rank j (all-to-all); the diagonal is ignored


# ---- formulas: n bytes, p ranks, alpha s per step, beta s per byte, gamma s per reduced byte ----------------------

def ring_reduce_scatter(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """(p-1)a + (p-1)/p n b + (p-1)/p n g (HCCL Ring.md)."""
    return (p - 1) * alpha + (p - 1) / p * n * (beta + gamma)


def ring_all_gather(n: float, p: int, alpha: float, beta: float) -> float:
    """(p-1)a + (p-1)/p n b, n the gathered output (HCCL Ring.md)."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def ring_all_reduce(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Reduce-scatter then all-gather: 2(p-1)a + 2(p-1)/p n b + (p-1)/p n g (HCCL Ring.md)."""
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def ring_broadcast(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Pipelined chain: (p-1)a + n b, the root sends the buffer once (nccl-tests: broadcast busbw = algbw). HCCL's
    Ring.md writes the unpipelined (p-1)(a + n b), an upper bound. Reduce is the same chain plus n g."""
    return (p - 1) * alpha + n * (beta + gamma)


def ring_scatter(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """(p-1)a + (p-1)/p n b, n the root's whole buffer; gather is the mirror image (HCCL Ring.md)."""
    return (p - 1) * alpha + (p - 1) / p * n * beta


def mesh_reduce_scatter(n: float, p: int, alpha: float, beta_link: float, gamma: float = 0.0) -> float:
    """One step, every peer link in use: a + n/p b + (p-1)/p n g, b per link (HCCL Mesh.md)."""
    return alpha + n / p * beta_link + (p - 1) / p * n * gamma


def mesh_all_gather(n: float, p: int, alpha: float, beta_link: float) -> float:
    """a + n/p b, b per link (HCCL Mesh.md); scatter and gather cost the same."""
    return alpha + n / p * beta_link


def mesh_all_reduce(n: float, p: int, alpha: float, beta_link: float, gamma: float = 0.0) -> float:
    """Reduce-scatter + all-gather: 2a + 2n/p b + (p-1)/p n g (HCCL Mesh.md); broadcast (scatter + all-gather) and
    reduce (reduce-scatter + gather) cost the same, broadcast without the g term."""
    return 2 * alpha + 2 * n / p * beta_link + (p - 1) / p * n * gamma


def rhd_all_reduce(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Recursive halving-doubling (HCCL RHD.md). p a power of two: 2 log2(p) a + 2(p-1)/p n b + (p-1)/p n g; else the
    extra ranks first fold into the 2^k block and get the result back at the end:
    (2k+2) a + (2(p'-1)/p' + 2) n b + ((p'-1)/p' + 1) n g with k = floor(log2 p), p' = 2^k."""
    if p & (p - 1) == 0:
        return 2 * math.log2(p) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma
    k = p.bit_length() - 1
    q = 1 << k
    return (2 * k + 2) * alpha + (2 * (q - 1) / q + 2) * n * beta + ((q - 1) / q + 1) * n * gamma


def rhd_reduce_scatter(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """HCCL RHD.md. p a power of two: log2(p) a + (p-1)/p n (b + g); else a fold (a + n(b + g)), k = floor(log2 p)
    halving steps of ceil(p / 2^i) n/p bytes, and a final scatter (a + n/p b)."""
    if p & (p - 1) == 0:
        return math.log2(p) * alpha + (p - 1) / p * n * (beta + gamma)
    k = p.bit_length() - 1
    blocks = sum(-(-p // (1 << i)) for i in range(1, k + 1))  # ceil(p / 2^i)
    return (alpha + n * (beta + gamma)) + (k * alpha + blocks * n / p * (beta + gamma)) + (alpha + n / p * beta)


def rhd_all_gather(n: float, p: int, alpha: float, beta: float) -> float:
    """As rhd_reduce_scatter without the reduction (HCCL RHD.md)."""
    return rhd_reduce_scatter(n, p, alpha, beta, 0.0)


def nvls_all_reduce(n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """NVLink SHARP: the switch reduces (multimem ld_reduce) and multicasts (multimem st). Each GPU sends its buffer
    plus its reduced 1/p share and receives as much: a + (p+1)/p n b. npuport's model, calibrated by nccl-tests#212."""
    return alpha + (p + 1) / p * n * beta


def pairwise_all_to_all(sizes: Matrix, alpha: float, beta: float) -> float:
    """Step k: rank i sends to i+k. (p-1)a + b sum_k max_i n(i, i+k); covers uneven splits (HCCL Pairwise.md)."""
    p = len(sizes)
    return (p - 1) * alpha + beta * sum(max(sizes[i][(i + k) % p] for i in range(p)) for k in range(1, p))


def mesh_all_to_all(sizes: Matrix, alpha: float, beta_link: float) -> float:
    """Every pair on its own link at once: a + b max_{i != j} n(i, j)."""
    p = len(sizes)
    return alpha + beta_link * max((sizes[i][j] for i in range(p) for j in range(p) if i != j), default=0.0)


def direct_all_to_all(sizes: Matrix, alpha: float, beta: float) -> float:
    """All sends at once through a switch, bound by the busiest rank's injection or reception: a + b max(row, column)."""
    p = len(sizes)
    out = max(sum(sizes[i][j] for j in range(p) if j != i) for i in range(p))
    into = max(sum(sizes[i][j] for i in range(p) if i != j) for j in range(p))
    return alpha + beta * max(out, into)


def even_split(nbytes: float, p: int) -> list[list[float]]:
    """The all-to-all matrix of a per-rank send buffer of nbytes split evenly over the p ranks."""
    return [[nbytes / p] * p for _ in range(p)]


# ---- nccl-tests bus bandwidth ---------------------------------------------------------------------------------------

def busbw_factor(kind: str, ranks: int) -> float:
    """busbw / algbw as nccl-tests defines it (doc/PERFORMANCE.md; src/gather.cu, src/alltoall.cu)."""
    kind = _kind(kind)
    if ranks < 1:
        raise NpuportError("a collective needs at least one rank", "ranks >= 1", str(ranks))
    if kind in ("all_reduce", "barrier"):
        return 2 * (ranks - 1) / ranks
    if kind in ("reduce_scatter", "all_gather", "all_to_all", "scatter", "gather"):
        return (ranks - 1) / ranks
    return 1.0  # broadcast, reduce, send_recv


def bus_bandwidth(kind: str, nbytes: float, seconds: float, ranks: int) -> float:
    """nccl-tests busbw (bytes/s) of one call: algbw = nbytes / seconds, times busbw_factor."""
    return nbytes / seconds * busbw_factor(kind, ranks) if seconds > 0 else math.inf


def algbw_from_busbw(kind: str, busbw: float, ranks: int) -> float:
    """The algorithm bandwidth (what hccl_test prints) that a bus bandwidth means for this kind and group size."""
    factor = busbw_factor(kind, ranks)
    return busbw / factor if factor > 0 else math.inf


# ---- link models ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Level:
    """One level of a system (inside a node, or between nodes)."""

    topology: str  # ring | mesh | switch
    bytes_per_s: float  # per direction; per link when per == "link" (a full mesh), else what one rank injects
    per: str
    alpha_s: float
    algorithms: Mapping[str, tuple[str, ...]]  # kind (or "default") -> candidate algorithms
    algorithm_alpha_s: Mapping[str, float]
    achieved: Mapping[str, float]  # algorithm -> measured fraction of bytes_per_s
    confidence: str  # the weakest confidence among topology, bandwidth and alpha


@dataclass(frozen=True)
class LinkSystem:
    name: str
    description: str
    chips: tuple[str, ...]
    library: str
    ranks_per_node: int
    hierarchy: str  # hccl | bandwidth_optimal
    launch_s: float
    intra: Level
    inter: Level


@dataclass(frozen=True)
class CommEstimate:
    """One collective's estimated time; `steps` lists (level, algorithm, seconds) of each stage."""

    kind: str
    nbytes: float
    ranks: int
    seconds: float
    steps: tuple[tuple[str, str, float], ...]
    line_rate: bool  # some stage ran at the line rate for want of a measured fraction: the time is a lower bound

    @property
    def algbw(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else math.inf

    @property
    def busbw(self) -> float:
        return bus_bandwidth(self.kind, self.nbytes, self.seconds, self.ranks)


_RANK = {"measured": 0, "vendor": 1, "uncertain": 2}


def _level(doc: Mapping[str, Any]) -> Level:
    conf = max((doc["topology"]["confidence"], doc["bandwidth"]["confidence"], doc["alpha"]["confidence"]), key=_RANK.__getitem__)
    return Level(
        topology=doc["topology"]["value"], bytes_per_s=float(doc["bandwidth"]["bytes_per_s"]), per=doc["bandwidth"]["per"],
        alpha_s=float(doc["alpha"]["seconds"]), algorithms={k: tuple(v) for k, v in doc["algorithms"].items()},
        algorithm_alpha_s={k: float(v["seconds"]) for k, v in doc.get("algorithm_alpha", {}).items()},
        achieved={k: float(v["fraction"]) for k, v in doc.get("achieved", {}).items()}, confidence=conf,
    )


@functools.lru_cache(maxsize=1)
def load_links() -> dict[str, LinkSystem]:
    """The systems of links.yaml, schema-checked; every chip they name must be an entry of hardware.yaml."""
    doc = load_checked(_FILE)
    chips = load_chips()
    out: dict[str, LinkSystem] = {}
    for name, s in doc["systems"].items():
        for chip in s["chips"]:
            if chip not in chips:
                raise MappingError(_FILE, f"systems.{name}", "chips", f"{chip!r} is not under chips in hardware.yaml")
        out[name] = LinkSystem(
            name=name, description=s["description"], chips=tuple(s["chips"]), library=s["library"],
            ranks_per_node=int(s["ranks_per_node"]), hierarchy=s["hierarchy"], launch_s=float(s["launch"]["seconds"]),
            intra=_level(s["intra_node"]), inter=_level(s["inter_node"]),
        )
    return out


def get_system(name: str) -> LinkSystem:
    systems = load_links()
    if name not in systems:
        raise NpuportError(f"no link model named {name!r}", "one of " + ", ".join(sorted(systems)), name)
    return systems[name]


def system_for_chip(chip: str) -> LinkSystem:
    """The system links.yaml pairs with a hardware.yaml chip (the first listed)."""
    for system in load_links().values():
        if chip in system.chips:
            return system
    paired = sorted({c for s in load_links().values() for c in s.chips})
    raise NpuportError(f"no link model pairs with chip {chip!r}", "one of " + ", ".join(paired), chip)


# ---- one level ------------------------------------------------------------------------------------------------------

Formula = Callable[[float, int, float, float, float], float]
_FORMULAS: dict[tuple[str, str], Formula] = {
    ("ring", "all_reduce"): ring_all_reduce, ("ring", "reduce_scatter"): ring_reduce_scatter,
    ("ring", "all_gather"): lambda n, p, a, b, g: ring_all_gather(n, p, a, b), ("ring", "broadcast"): ring_broadcast,
    ("ring", "reduce"): ring_broadcast, ("ring", "scatter"): ring_scatter, ("ring", "gather"): ring_scatter,
    ("mesh", "all_reduce"): mesh_all_reduce, ("mesh", "reduce_scatter"): mesh_reduce_scatter,
    ("mesh", "all_gather"): lambda n, p, a, b, g: mesh_all_gather(n, p, a, b),
    ("mesh", "broadcast"): lambda n, p, a, b, g: mesh_all_reduce(n, p, a, b, 0.0), ("mesh", "reduce"): mesh_all_reduce,
    ("mesh", "scatter"): lambda n, p, a, b, g: mesh_all_gather(n, p, a, b),
    ("mesh", "gather"): lambda n, p, a, b, g: mesh_all_gather(n, p, a, b),
    ("rhd", "all_reduce"): rhd_all_reduce, ("rhd", "reduce_scatter"): rhd_reduce_scatter,
    ("rhd", "all_gather"): lambda n, p, a, b, g: rhd_all_gather(n, p, a, b),
    ("nvls", "all_reduce"): nvls_all_reduce,
}
_ALL_TO_ALL: dict[str, Callable[[Matrix, float, float], float]] = {
    "pairwise": pairwise_all_to_all, "mesh": mesh_all_to_all, "direct": direct_all_to_all, "ring": pairwise_all_to_all,
}


def _beta(level: Level, algorithm: str, p: int) -> tuple[float, bool]:
    """Seconds per byte on one transfer path of this algorithm, and whether it is the unmeasured line rate. Mesh
    formulas charge each peer link: a mesh topology has its own link per peer; on a switch a rank's injection
    bandwidth is shared by its p-1 peers. Every other algorithm drives one path at the rank's (or one link's) rate."""
    fraction = level.achieved.get(algorithm)
    rate = level.bytes_per_s * (fraction if fraction is not None else 1.0)
    if algorithm == "mesh" and level.per == "rank" and p > 1:
        rate /= p - 1
    return 1.0 / rate, fraction is None


def level_time(kind: str, nbytes: float, p: int, level: Level, *, gamma: float = 0.0, sizes: Matrix | None = None,
               algorithm: str | None = None) -> tuple[float, str, bool]:
    """(seconds, algorithm, line_rate) of one collective over p ranks of one level: the fastest of the level's
    candidate algorithms for the kind (or `algorithm`); ring where none of them has a formula for the kind."""
    if p <= 1:
        return 0.0, "none", False
    if kind == "send_recv":  # one message on one path, whatever the level's collective algorithms
        beta, line = _beta(level, "ring", 2)
        return level.alpha_s + nbytes * beta, "p2p", line
    names = (algorithm,) if algorithm else level.algorithms.get(kind, level.algorithms["default"])
    if kind not in _REDUCING:
        gamma = 0.0
    best: tuple[float, str, bool] | None = None
    for name in names:
        timed = _one(kind, nbytes, p, level, name, gamma, sizes)
        if timed is not None and (best is None or timed[0] < best[0]):
            best = (timed[0], name, timed[1])
    if best is None and algorithm:
        raise NpuportError(f"no {algorithm} formula for {kind}", "an algorithm that has one (ring has all)", algorithm)
    if best is None:
        timed = _one(kind, nbytes, p, level, "ring", gamma, sizes)
        assert timed is not None  # ring has a formula for every kind
        best = (timed[0], "ring", timed[1])
    return best


def _one(kind: str, n: float, p: int, level: Level, name: str, gamma: float, sizes: Matrix | None) -> tuple[float, bool] | None:
    alpha = level.algorithm_alpha_s.get(name, level.alpha_s)
    beta, line = _beta(level, name, p)
    if kind == "all_to_all":
        fn = _ALL_TO_ALL.get(name)
        return None if fn is None else (fn(sizes if sizes is not None else even_split(n, p), alpha, beta), line)
    formula = _FORMULAS.get((name, kind))
    return None if formula is None else (formula(n, p, alpha, beta, gamma), line)


# ---- the estimate ---------------------------------------------------------------------------------------------------

def _kind(kind: str) -> str:
    k = _ALIASES.get(kind.lower(), kind.lower())
    if k not in KINDS:
        raise NpuportError(f"unknown collective kind {kind!r}", "one of " + ", ".join(KINDS), kind)
    return k


def collective_time(kind: str, nbytes: float, ranks: int, system: LinkSystem | str, *, ranks_per_node: int | None = None,
                    gamma: float = 0.0, sizes: Matrix | None = None, algorithm: str | None = None) -> CommEstimate:
    """Time of one collective of `nbytes` (nccl-tests size) over `ranks` ranks of `system`.

    ranks_per_node: the system's unless given (1 puts every rank on its own node: send_recv across nodes). A group
    within one node uses the intra-node level alone; a larger one must fill whole nodes and runs in two levels.
    gamma: seconds per reduced byte (0 unless the caller has a figure). sizes: the p x p all-to-all matrix of an
    uneven split (bytes rank i sends rank j); nbytes is then ignored. algorithm: force one (single-level groups)."""
    k = _kind(kind)
    sys_ = get_system(system) if isinstance(system, str) else system
    g = sys_.ranks_per_node if ranks_per_node is None else ranks_per_node
    if ranks < 1 or g < 1:
        raise NpuportError("a collective needs at least one rank per group and per node", "ranks >= 1, ranks_per_node >= 1",
                           f"ranks={ranks}, ranks_per_node={g}")
    if sizes is not None:
        if len(sizes) != ranks or any(len(row) != ranks for row in sizes):
            raise NpuportError("the all-to-all size matrix must be ranks x ranks", f"{ranks} x {ranks}", f"{len(sizes)} rows")
        nbytes = max(sum(row) for row in sizes)
    n = float(BARRIER_BYTES if k == "barrier" else nbytes)
    kk = "all_reduce" if k == "barrier" else k
    if ranks == 1:
        return CommEstimate(k, n, 1, 0.0, (), False)
    if ranks <= g:
        t, alg, line = level_time(kk, n, ranks, sys_.intra, gamma=gamma, sizes=sizes, algorithm=algorithm)
        return CommEstimate(k, n, ranks, sys_.launch_s + t, (("intra", alg, t),), line)
    if ranks % g:
        raise NpuportError("a group that spans nodes must fill whole nodes", f"ranks a multiple of {g}", str(ranks))
    steps = _two_level(kk, n, ranks // g, g, sys_, gamma, sizes)
    total = sys_.launch_s + sum(t for _, _, t, _ in steps)
    return CommEstimate(k, n, ranks, total, tuple((lvl, alg, t) for lvl, alg, t, _ in steps), any(ln for *_, ln in steps))


Step = tuple[str, str, float, bool]


def _two_level(kind: str, n: float, nodes: int, g: int, s: LinkSystem, gamma: float, sizes: Matrix | None) -> list[Step]:
    """The stages of a collective over `nodes` x `g` ranks (rank = node * g + local), per HCCL algo_intro.md."""
    def intra(k: str, m: float) -> Step:
        return ("intra", *_named(level_time(k, m, g, s.intra, gamma=gamma)))

    def inter(k: str, m: float) -> Step:
        return ("inter", *_named(level_time(k, m, nodes, s.inter, gamma=gamma)))

    hccl = s.hierarchy == "hccl"
    if kind == "all_reduce":
        return [intra("reduce_scatter", n), inter("all_reduce", n / g), intra("all_gather", n)]
    if kind == "reduce_scatter":  # HCCL: across servers first, keeping each server's block contiguous
        return [inter(kind, n), intra(kind, n / nodes)] if hccl else [intra(kind, n), inter(kind, n / g)]
    if kind == "all_gather":  # HCCL: inside first, then the whole server block across
        return [intra(kind, n / nodes), inter(kind, n)] if hccl else [inter(kind, n / g), intra(kind, n)]
    if kind == "broadcast":
        return [intra("scatter", n), inter("broadcast", n / g), intra("all_gather", n)]
    if kind == "reduce":
        return [intra("reduce_scatter", n), inter("reduce", n / g), intra("gather", n)]
    if kind in ("scatter", "gather"):
        return [inter(kind, n), intra(kind, n / nodes)] if kind == "scatter" else [intra(kind, n / nodes), inter(kind, n)]
    if kind == "send_recv":
        return [inter(kind, n)]
    return _two_level_all_to_all(n, nodes, g, s, sizes)


def _named(timed: tuple[float, str, bool]) -> tuple[str, float, bool]:
    return timed[1], timed[0], timed[2]


def _two_level_all_to_all(n: float, nodes: int, g: int, s: LinkSystem, sizes: Matrix | None) -> list[Step]:
    """HCCL: an all-to-all inside each server that gathers, on local rank j, everything bound for local rank j of any
    server; then an all-to-all across servers among equal local ranks. bandwidth_optimal (NCCL's flat send/recv):
    the intra-node and the inter-node traffic flow at once, so the slower of the two counts."""
    m = sizes if sizes is not None else even_split(n, nodes * g)

    def rank(node: int, local: int) -> int:
        return node * g + local

    if s.hierarchy == "hccl":
        intra = max(_a2a_time([[sum(m[rank(a, i)][rank(b, j)] for b in range(nodes)) for j in range(g)] for i in range(g)], s.intra)
                    for a in range(nodes))
        inter = max(_a2a_time([[sum(m[rank(a, i)][rank(b, j)] for i in range(g)) for b in range(nodes)] for a in range(nodes)], s.inter)
                    for j in range(g))
        return [("intra", intra[1], intra[0], intra[2]), ("inter", inter[1], inter[0], inter[2])]
    intra = max(_a2a_time([[m[rank(a, i)][rank(a, j)] for j in range(g)] for i in range(g)], s.intra) for a in range(nodes))
    # each rank drives its own NIC: per node-step k it sends what it holds for every rank of node a+k
    alpha = s.inter.algorithm_alpha_s.get("pairwise", s.inter.alpha_s)
    beta, line = _beta(s.inter, "pairwise", nodes)
    per_step = [max(sum(m[rank(a, i)][rank((a + k) % nodes, j)] for j in range(g)) for a in range(nodes) for i in range(g))
                for k in range(1, nodes)]
    t_inter = (nodes - 1) * alpha + beta * sum(per_step)
    if t_inter >= intra[0]:
        return [("inter", "pairwise", t_inter, line or intra[2])]
    return [("intra", intra[1], intra[0], intra[2] or line)]


def _a2a_time(sub: Matrix, level: Level) -> tuple[float, str, bool]:
    return level_time("all_to_all", 0.0, len(sub), level, sizes=sub)
