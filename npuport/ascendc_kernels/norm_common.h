/*
 * npuport: shared pieces of the row-norm kernels (rms_norm, add_rms_norm, layer_norm) for Ascend910B (dav-2201).
 *
 * NormTiling (tiling_structs.h) is filled by norm_tiling.py (the single source of truth) and passed by value.
 * The kernels never derive a tile size: buffer sizes, rows per tile, column chunks and the core split come
 * from the struct.
 *
 * Written against the public kernel_operator.h API; NOT compiled or run by the npuport authors (no CANN there).
 */
#ifndef NPUPORT_NORM_COMMON_H
#define NPUPORT_NORM_COMMON_H

#include "kernel_operator.h"
#include "tiling_structs.h"


namespace npuport {

constexpr uint32_t kBlock = 32;

__aicore__ inline uint32_t AlignBlock(uint32_t bytes) { return (bytes + kBlock - 1) / kBlock * kBlock; }

// rows x cols elements from GM (row pitch gmPitch elements) into UB (row pitch ubPitch elements); cols need
// not be 32-byte aligned: DataCopyPad pads each row on the right.
template <typename T>
__aicore__ inline void CopyRowsIn(const AscendC::LocalTensor<T>& dst, const AscendC::GlobalTensor<T>& src,
                                  uint32_t rows, uint32_t cols, uint64_t gmPitch, uint32_t ubPitch) {
    uint32_t rowBytes = cols * sizeof(T);
    AscendC::DataCopyExtParams p{static_cast<uint16_t>(rows), rowBytes,
                                 static_cast<uint32_t>((gmPitch - cols) * sizeof(T)),
                                 (ubPitch * static_cast<uint32_t>(sizeof(T)) - AlignBlock(rowBytes)) / kBlock, 0};
    AscendC::DataCopyPadExtParams<T> pad{false, 0, 0, 0};
    AscendC::DataCopyPad(dst, src, p, pad);
}

template <typename T>
__aicore__ inline void CopyRowsOut(const AscendC::GlobalTensor<T>& dst, const AscendC::LocalTensor<T>& src,
                                   uint32_t rows, uint32_t cols, uint64_t gmPitch, uint32_t ubPitch) {
    uint32_t rowBytes = cols * sizeof(T);
    AscendC::DataCopyExtParams p{static_cast<uint16_t>(rows), rowBytes,
                                 (ubPitch * static_cast<uint32_t>(sizeof(T)) - AlignBlock(rowBytes)) / kBlock,
                                 static_cast<uint32_t>((gmPitch - cols) * sizeof(T)), 0};
    AscendC::DataCopyPad(dst, src, p);
}

__aicore__ inline void CopyFloatsOut(const AscendC::GlobalTensor<float>& dst, const AscendC::LocalTensor<float>& src,
                                     uint32_t n) {
    AscendC::DataCopyExtParams p{1, n * static_cast<uint32_t>(sizeof(float)), 0, 0, 0};
    AscendC::DataCopyPad(dst, src, p);
}

// half / bfloat16 -> float is exact; float -> half / bfloat16 rounds to nearest even (torch's .to()).
template <typename T>
__aicore__ inline void ToFloat(const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<T>& src, uint32_t n) {
    if constexpr (AscendC::IsSameType<T, float>::value) {
        AscendC::Adds(dst, src, 0.0f, n);
    } else {
        AscendC::Cast(dst, src, AscendC::RoundMode::CAST_NONE, n);
    }
}

template <typename T>
__aicore__ inline void FromFloat(const AscendC::LocalTensor<T>& dst, const AscendC::LocalTensor<float>& src, uint32_t n) {
    if constexpr (AscendC::IsSameType<T, float>::value) {
        AscendC::Adds(dst, src, 0.0f, n);
    } else {
        AscendC::Cast(dst, src, AscendC::RoundMode::CAST_RINT, n);
    }
}

// Vector results read by the scalar unit (and scalar writes read by vector) need an explicit event.
__aicore__ inline void WaitVectorForScalar() {
    event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(AscendC::HardEvent::V_S));
    AscendC::SetFlag<AscendC::HardEvent::V_S>(e);
    AscendC::WaitFlag<AscendC::HardEvent::V_S>(e);
}

__aicore__ inline void WaitScalarForVector() {
    event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(AscendC::HardEvent::S_V));
    AscendC::SetFlag<AscendC::HardEvent::S_V>(e);
    AscendC::WaitFlag<AscendC::HardEvent::S_V>(e);
}

// sum(src[0:n]) in fp32 via ReduceSum (work doubles as the destination, which the API allows).
__aicore__ inline float RowSum(const AscendC::LocalTensor<float>& src, const AscendC::LocalTensor<float>& work, uint32_t n) {
    AscendC::ReduceSum(work, src, work, static_cast<int32_t>(n));
    WaitVectorForScalar();
    return work.GetValue(0);
}

// sum(src^2) using sq as scratch.
__aicore__ inline float RowSumSq(const AscendC::LocalTensor<float>& src, const AscendC::LocalTensor<float>& sq,
                                 const AscendC::LocalTensor<float>& work, uint32_t n) {
    AscendC::Mul(sq, src, src, n);
    return RowSum(sq, work, n);
}

// 1 / sqrt(v) on the vector unit (one element), read back as a scalar.
__aicore__ inline float Rsqrt1(float v, const AscendC::LocalTensor<float>& work) {
    AscendC::Duplicate(work, v, 8);
    AscendC::Sqrt(work, work, 8);
    AscendC::Duplicate(work[8], 1.0f, 8);
    AscendC::Div(work, work[8], work, 8);
    WaitVectorForScalar();
    return work.GetValue(0);
}

struct CoreRows {
    uint32_t start;
    uint32_t count;
};

__aicore__ inline CoreRows RowsOf(const NormTiling& t, uint32_t core) {
    uint32_t extra = core < t.rows_rem ? core : t.rows_rem;
    return {core * t.rows_base + extra, t.rows_base + (core < t.rows_rem ? 1u : 0u)};
}

// gamma[c0 : c0+n] (native dtype G) -> fp32 in UB.
template <typename G>
__aicore__ inline void LoadParamF32(const AscendC::LocalTensor<float>& dst, const AscendC::LocalTensor<G>& stage,
                                    const AscendC::GlobalTensor<G>& src, uint32_t n) {
    CopyRowsIn(stage, src, 1, n, n, AlignBlock(n * sizeof(G)) / sizeof(G));
    event_t e = static_cast<event_t>(GetTPipePtr()->FetchEventID(AscendC::HardEvent::MTE2_V));
    AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(e);
    AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(e);
    ToFloat(dst, stage, n);
}

}  // namespace npuport

#endif  // NPUPORT_NORM_COMMON_H
