// npuport_ascendc_ext: the thin host side of the npuport Ascend C kernels.
//
// Python (npuport/ascendc_kernels/host/launch.py) computes the tiling, allocates every output and passes the
// packed tiling struct as a CPU uint8 tensor; this file checks sizes, copies the bytes into the C struct and
// calls the launcher compiled from each kernel.asc on torch_npu's current stream. The only tiling computed
// here is the Matmul API's own TCubeTiling for flash attention, with its base block fixed to the Python
// tile sizes. Status: written against torch_npu / CANN headers, NOT compiled by the npuport authors.
#include <torch/extension.h>

#include <cstring>

#include "torch_npu/csrc/core/npu/NPUStream.h"
#include "tiling/platform/platform_ascendc.h"
#include "tiling/tiling_api.h"

#include "../tiling_structs.h"

extern "C" int npuport_launch_rms_norm(void*, uint32_t, int, int, void*, void*, void*, void*, const NormTiling*);
extern "C" int npuport_launch_add_rms_norm(void*, uint32_t, int, int, void*, void*, void*, void*, void*, void*,
                                           const NormTiling*);
extern "C" int npuport_launch_layer_norm(void*, uint32_t, int, int, void*, void*, void*, void*, void*, void*, void*,
                                         void*, const NormTiling*);
extern "C" int npuport_launch_flash_attention(void*, uint32_t, int, void*, void*, void*, void*, void*, void*, void*,
                                              void*, const FaLaunchTiling*);

namespace {

int DtypeCode(const at::Tensor& t) {
    switch (t.scalar_type()) {
        case at::kHalf: return 0;
        case at::kBFloat16: return 1;
        case at::kFloat: return 2;
        default: TORCH_CHECK(false, "npuport kernels: unsupported dtype ", t.scalar_type());
    }
    return -1;
}

template <typename S>
S Unpack(const at::Tensor& blob) {
    TORCH_CHECK(blob.device().is_cpu() && blob.scalar_type() == at::kByte, "tiling must be a CPU uint8 tensor");
    TORCH_CHECK(static_cast<size_t>(blob.numel()) == sizeof(S), "tiling struct size mismatch: Python packed ",
                blob.numel(), " bytes, C expects ", sizeof(S), " (kernel source and tiling.py drifted)");
    S s;
    std::memcpy(&s, blob.data_ptr(), sizeof(S));
    return s;
}

void* Ptr(const at::Tensor& t) { return t.numel() ? t.data_ptr() : nullptr; }

void* Stream() { return c10_npu::getCurrentNPUStream().stream(); }

void Check(int rc, const char* what) { TORCH_CHECK(rc == 0, "npuport ", what, ": unsupported dtype combination"); }

void RmsNorm(at::Tensor x, at::Tensor g, at::Tensor y, at::Tensor rstd, at::Tensor blob, int64_t cores) {
    NormTiling t = Unpack<NormTiling>(blob);
    Check(npuport_launch_rms_norm(Stream(), cores, DtypeCode(x), DtypeCode(g), Ptr(x), Ptr(g), Ptr(y), Ptr(rstd), &t),
          "rms_norm");
}

void AddRmsNorm(at::Tensor x1, at::Tensor x2, at::Tensor g, at::Tensor y, at::Tensor rstd, at::Tensor xs,
                at::Tensor blob, int64_t cores) {
    NormTiling t = Unpack<NormTiling>(blob);
    Check(npuport_launch_add_rms_norm(Stream(), cores, DtypeCode(x1), DtypeCode(g), Ptr(x1), Ptr(x2), Ptr(g), Ptr(y),
                                      Ptr(rstd), Ptr(xs), &t), "add_rms_norm");
}

void LayerNorm(at::Tensor x, at::Tensor g, at::Tensor beta, at::Tensor res, at::Tensor y, at::Tensor mean,
               at::Tensor rstd, at::Tensor xs, at::Tensor blob, int64_t cores) {
    NormTiling t = Unpack<NormTiling>(blob);
    Check(npuport_launch_layer_norm(Stream(), cores, DtypeCode(x), DtypeCode(g), Ptr(x), Ptr(g), Ptr(beta), Ptr(res),
                                    Ptr(y), Ptr(mean), Ptr(rstd), Ptr(xs), &t), "layer_norm");
}

// The Matmul API's TCubeTiling for one of the two attention matmuls, base block fixed to the Python tiles.
void CubeTiling(AscendC::tiling::TCubeTiling& out, int m, int n, int k, bool transB, matmul_tiling::DataType dt, uint64_t ubLeft) {
    auto* platform = platform_ascendc::PlatformAscendCManager::GetInstance();
    matmul_tiling::MultiCoreMatmulTiling api(*platform);
    api.SetDim(1);  // one AIV's matmul per call: units are already split over cores by the Python tiling
    api.SetAType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, dt, false);
    api.SetBType(matmul_tiling::TPosition::GM, matmul_tiling::CubeFormat::ND, dt, transB);
    api.SetCType(matmul_tiling::TPosition::VECIN, matmul_tiling::CubeFormat::ND, matmul_tiling::DataType::DT_FLOAT);
    api.SetOrgShape(m, n, k);
    api.SetShape(m, n, k);
    api.SetBias(false);
    api.SetFixSplit(m, n, -1);
    api.SetBufferSpace(-1, -1, ubLeft);
    TORCH_CHECK(api.GetTiling(out) != -1, "npuport flash_attention: matmul tiling failed for ", m, "x", n, "x", k);
}

void FlashAttention(at::Tensor q, at::Tensor k, at::Tensor v, at::Tensor mask, at::Tensor out, at::Tensor lse,
                    at::Tensor ws, at::Tensor blob, int64_t cores) {
    FaLaunchTiling t{};
    t.fa = Unpack<FaTiling>(blob);
    auto dt = q.scalar_type() == at::kBFloat16 ? matmul_tiling::DataType::DT_BF16 : matmul_tiling::DataType::DT_FLOAT16;
    CubeTiling(t.mm1, t.fa.q_tile, t.fa.kv_tile, t.fa.d_pad, true, dt, 0);
    CubeTiling(t.mm2, t.fa.q_tile, t.fa.d_pad, t.fa.kv_tile, false, dt, 0);
    auto* platform = platform_ascendc::PlatformAscendCManager::GetInstance();
    auto sysWs = at::empty({static_cast<int64_t>(platform->GetLibApiWorkSpaceSize())},
                           q.options().dtype(at::kByte));
    uint32_t blockDim = static_cast<uint32_t>((cores + 1) / 2);  // mix 1:2: one AI core per two vector cores
    Check(npuport_launch_flash_attention(Stream(), blockDim, DtypeCode(q), Ptr(q), Ptr(k), Ptr(v), Ptr(mask), Ptr(out),
                                         Ptr(lse), Ptr(ws), Ptr(sysWs), &t), "flash_attention");
}

}  // namespace

PYBIND11_MODULE(npuport_ascendc_ext, m) {
    m.doc() = "npuport Ascend C kernels (launchers on torch_npu's current stream)";
    m.def("rms_norm", &RmsNorm);
    m.def("add_rms_norm", &AddRmsNorm);
    m.def("layer_norm", &LayerNorm);
    m.def("flash_attention", &FlashAttention);
}
