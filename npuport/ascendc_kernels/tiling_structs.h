/*
 * npuport: the tiling structs shared by the Ascend C kernels and their host launcher.
 *
 * Filled by the Python tiling (norm_tiling.py, flash_attention/tiling.py: the single source of truth),
 * packed with Python's struct module in this field order, and passed to the kernels by value. Only
 * fixed-width scalars and fixed-size arrays, ordered so that C inserts no padding; a test parses this file
 * and checks it against the Python field lists, so the two cannot drift.
 */
#ifndef NPUPORT_TILING_STRUCTS_H
#define NPUPORT_TILING_STRUCTS_H

#include <cstdint>

#include "kernel_tiling/kernel_tiling.h"

struct NormTiling {
    uint32_t rows;
    uint32_t h;
    uint32_t row_stride;      // UB elements per row (32-byte aligned for T and for float)
    uint32_t used_cores;
    uint32_t rows_base;       // core i owns rows_base + (i < rows_rem) rows from i*rows_base + min(i, rows_rem)
    uint32_t rows_rem;
    uint32_t rows_per_tile;
    uint32_t col_tile;
    uint32_t col_chunks;      // 1 unless split
    uint32_t col_tail;
    uint32_t split;           // 1: one row per tile in column chunks, two passes
    uint32_t buffer_num;      // queue depth (2 = double buffering)
    uint32_t in_bytes;
    uint32_t out_bytes;
    uint32_t stat_bytes;
    uint32_t gamma_in_bytes;
    uint32_t gamma_f32_bytes;
    uint32_t beta_f32_bytes;
    uint32_t f32_bytes;
    uint32_t sq_bytes;
    uint32_t work_bytes;
    uint32_t has_beta;
    uint32_t has_residual;
    uint32_t in_elem_bytes;
    uint32_t gamma_elem_bytes;
    float eps;
    float inv_h;
};

constexpr uint32_t FA_MAX_CORES = 64;

struct FaTiling {
    uint64_t q_sb;
    uint64_t q_sn;
    uint64_t q_ss;
    uint64_t k_sb;
    uint64_t k_sn;
    uint64_t k_ss;
    uint64_t v_sb;
    uint64_t v_sn;
    uint64_t v_ss;
    uint64_t o_sb;
    uint64_t o_sn;
    uint64_t o_ss;
    uint64_t mask_sb;
    uint64_t mask_sn;
    uint64_t mask_ss;
    uint64_t workspace_per_core;
    uint32_t batch;
    uint32_t heads_q;
    uint32_t heads_kv;
    uint32_t group;
    uint32_t sq;
    uint32_t skv;
    uint32_t d;
    uint32_t d_pad;
    uint32_t q_tile;
    uint32_t kv_tile;
    uint32_t q_blocks;
    uint32_t kv_blocks;
    uint32_t mask_kind;   // 0 none, 1 causal (table), 2 additive fp32
    uint32_t units;
    uint32_t used_cores;
    uint32_t buffer_num;
    uint32_t s_bytes;
    uint32_t mask_bytes;
    uint32_t p_bytes;
    uint32_t pv_bytes;
    uint32_t acc_bytes;
    uint32_t o_bytes;
    uint32_t stat_bytes;
    uint32_t work_bytes;
    uint32_t fold_bytes;
    uint32_t brcb_bytes;
    uint32_t cmp_bytes;
    uint32_t in_elem_bytes;
    uint32_t is_bf16;
    float scale;
    uint32_t reserved;
    uint32_t unit_start[FA_MAX_CORES + 1];
};

struct FaLaunchTiling {
    FaTiling fa;
    AscendC::tiling::TCubeTiling mm1;  // S = Q K^T: M = q_tile, N = kv_tile, K = d_pad
    AscendC::tiling::TCubeTiling mm2;  // PV = P V:  M = q_tile, N = d_pad,  K = kv_tile
};

#endif  // NPUPORT_TILING_STRUCTS_H
