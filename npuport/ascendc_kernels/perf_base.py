"""The performance-model shape every kernel returns: work counts, the roofline time, a modeled time, and the
assumptions behind the gap between them. These are estimates, never measurements.

Roofline units: HBM bytes at chip.memory_bandwidth, fp32 vector element-ops at the fp32 vector rate (one
repeat = vec_calc_size*2 bytes, i.e. half chip.vector_peak for fp32), cube FLOPs at chip.matrix_peak[dtype].
The three engines (MTE, vector, cube) overlap when double buffering works, so roofline = max of the three.
Modeled = max(memory / MTE eff., vector + scalar overhead, cube / cube eff.) + launch + pipeline fill; attainment = roofline / modeled.
The overhead figures are assumptions (listed in every estimate), to be replaced by numbers from an NPU run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npuport.ascendc_kernels.tiling_base import platform_of
from npuport.cost.roofline import ChipProfile

LAUNCH_S = 5e-6  # assumption: kernel launch + tiling copy on the stream
SYNC_CYCLES = 150  # assumption: one vector->scalar->vector round trip (GetValue after V_S, S_V back)
MTE_EFFICIENCY = 0.85  # assumption: fraction of peak HBM bandwidth a streaming DataCopyPad kernel sustains
CUBE_EFFICIENCY = 0.85  # assumption: fraction of cube peak the matmul client sustains on these tile sizes
OVERHEAD_NOTES = (
    f"launch overhead {LAUNCH_S * 1e6:.0f} us (assumed)",
    f"{SYNC_CYCLES} cycles per vector<->scalar synchronisation (assumed)",
    f"DMA sustains {MTE_EFFICIENCY:.0%} of peak HBM bandwidth, cube {CUBE_EFFICIENCY:.0%} of peak (assumed)",
    "exp / sqrt / div counted as one vector pass each (assumed; transcendental throughput unmeasured)",
    "engines overlap perfectly under double buffering (upper bound on overlap)",
)


@dataclass(frozen=True)
class PerfEstimate:
    kernel: str
    shape: str
    dtype: str
    chip: str
    hbm_bytes: float
    vector_ops: float  # fp32 element-ops
    cube_flops: float
    memory_s: float
    vector_s: float
    cube_s: float
    scalar_s: float
    roofline_s: float
    bound: str  # 'memory' | 'vector' | 'cube'
    modeled_s: float
    assumptions: tuple[str, ...] = field(default=OVERHEAD_NOTES)

    @property
    def attainment(self) -> float:
        """Expected fraction of the roofline the kernel reaches (estimate)."""
        return self.roofline_s / self.modeled_s if self.modeled_s else 0.0

    def render(self) -> str:
        return (f"{self.kernel} {self.shape} {self.dtype} on {self.chip} (ESTIMATE): "
                f"{self.hbm_bytes / 1e6:.1f} MB HBM, {self.vector_ops / 1e9:.2f} G vec-ops, "
                f"{self.cube_flops / 1e12:.3f} TFLOP cube; roofline {self.roofline_s * 1e6:.1f} us "
                f"({self.bound}-bound: mem {self.memory_s * 1e6:.1f}, vec {self.vector_s * 1e6:.1f}, "
                f"cube {self.cube_s * 1e6:.1f} us); modeled {self.modeled_s * 1e6:.1f} us, "
                f"attainment {self.attainment:.0%}")


def fp32_vector_rate(chip: ChipProfile) -> float:
    """fp32 element-ops per second over all vector cores: a repeat moves vec_calc_size*2 bytes = /4 fp32."""
    p = platform_of(chip)
    return p["vector_core_cnt"] * (p["vec_calc_size"] * 2 / 4) * p["cube_freq_mhz"] * 1e6


def estimate(kernel: str, shape: str, dtype: str, chip: ChipProfile, *, hbm_bytes: float, vector_ops: float,
             cube_flops: float = 0.0, syncs_per_core: float = 0.0, fill_s: float = 0.0,
             cube_vector_serial: bool = False, extra: tuple[str, ...] = ()) -> PerfEstimate:
    """`cube_vector_serial`: each vector core waits for its own matmuls (no preload of the next QK^T while it
    runs softmax), but the two vector cores of an AI core share its cube, so the cube overlaps one of them:
    vector-core time = cube / 2 + vector, cube time = cube."""
    memory_s = hbm_bytes / chip.memory_bandwidth
    vector_s = vector_ops / fp32_vector_rate(chip)
    cube_s = cube_flops / chip.peak_flops(dtype, matrix=True) if cube_flops else 0.0
    scalar_s = syncs_per_core * SYNC_CYCLES / (platform_of(chip)["cube_freq_mhz"] * 1e6)
    times = {"memory": memory_s, "vector": vector_s, "cube": cube_s}
    bound = max(times, key=times.__getitem__)
    roofline = times[bound]
    cube_eff = cube_s / CUBE_EFFICIENCY
    vec_side = vector_s + scalar_s + (cube_eff / 2 if cube_vector_serial else 0.0)
    modeled = max(memory_s / MTE_EFFICIENCY, vec_side, cube_eff) + LAUNCH_S + fill_s
    return PerfEstimate(kernel, shape, dtype, chip.name, hbm_bytes, vector_ops, cube_flops, memory_s, vector_s,
                        cube_s, scalar_s, roofline, bound, modeled, OVERHEAD_NOTES + extra + chip.assumptions)
