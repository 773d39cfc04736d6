#include "cpu/matmul.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "cpu/repack.h"

namespace ei {

namespace {
// Below this many tokens the per-token vec_dots win (the GEMM pads columns to panels of 8; a
// 4-row interleaved one-column kernel was tried for decode and measured slower: 73 vs 96 tok/s).
constexpr int64_t kGemmMinTokens = 4;
// From this many activation rows ggml-cpu multiplies k-quant weights it has not repacked with
// its tiled GEMM (tiled.cpp), whose float order vec_dot_tiled reproduces.
constexpr int64_t kTiledMinBatch = 8;
// Row tasks per pool thread (dynamic balancing; each task costs one atomic claim).
constexpr int64_t kTasksPerThread = 4;
// How far ahead of the row being multiplied a decode requests the weight bytes it will need.
// A one-token matmul streams every weight row once from DRAM, and the hardware prefetcher alone
// keeps too few lines in flight while the core is busy with the dot products: a Q8_0 GEMV read
// 6.7 GB/s of this core's ~12.5, and 9.4 GB/s with the next 2-5 KiB requested explicitly (Zen 1,
// docs/PERFORMANCE.md). A prefetch changes no result.
constexpr size_t kPrefetchBytes = 4096;
constexpr size_t kCacheLine = 64;

// Requests the bytes [from, to) into the cache (clamped to end, where the tensor stops).
inline void prefetch_span(const uint8_t* from, const uint8_t* to, const uint8_t* end) {
    for (const uint8_t* p = from; p < std::min(to, end); p += kCacheLine) __builtin_prefetch(p, 0, 3);
}
}  // namespace

size_t matmul_act_row_bytes(const KernelTable& kt, const Tensor& W) {
    return row_bytes(kt.types[W.type].vec_dot_type, W.cols());
}

void matmul(ThreadPool& pool, const KernelTable& kt, const Tensor& W, const float* x, int64_t n, float* y,
            MatmulScratch& scratch) {
    const TypeKernels& wk = kt.types[W.type];
    const TypeKernels& ak = kt.types[wk.vec_dot_type];
    if (!wk.vec_dot || (wk.vec_dot_type != TYPE_F32 && !ak.from_float))
        throw Error(std::string("no matmul kernel for weight type ") + type_info(W.type).name);
    const int64_t K = W.cols();
    const int64_t M = W.rows();
    const size_t act_row = row_bytes(wk.vec_dot_type, K);

    // Convert the activations once (F32 weights use them as they are).
    const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
    if (wk.vec_dot_type != TYPE_F32) {
        if (scratch.act.size() < act_row * n) scratch.act.resize(act_row * n);
        uint8_t* dst = scratch.act.data();
        if (n == 1) {
            ak.from_float(x, dst, K);
        } else {
            pool.run([&](int ith, int nth) {
                int64_t t0, t1;
                ThreadPool::split(n, ith, nth, &t0, &t1);
                for (int64_t t = t0; t < t1; ++t) ak.from_float(x + t * K, dst + t * act_row, K);
            });
        }
        act = dst;
    }

    // Weights repacked at load (cpu/repack.h): the packed GEMV/GEMM for any batch, split by
    // 16-row groups (decode: several tasks a thread for balance; prefill: fewer, larger ones).
    if (W.packed && wk.gemm_packed) {
        const int64_t groups = M / kPackRows;
        const int per_thread = n >= kGemmMinTokens ? 2 : (int)kTasksPerThread;
        const int tasks = (int)std::max<int64_t>(1, std::min<int64_t>(groups, per_thread * pool.size()));
        pool.run([&](int ith, int nth) {
            const int64_t g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
            if (g1 > g0)
                wk.gemm_packed(K, (g1 - g0) * kPackRows, n, W.packed.get() + g0 * W.packed_group_bytes,
                               W.packed_group_bytes, act, act_row, y + g0 * kPackRows, M);
        }, tasks);
        return;
    }

    // Weight rows are cut into tasks of a multiple of 4 rows (the GEMM tiles' height), several
    // per thread, taken from the pool's shared counter: a thread that runs late or slow (another
    // process on its core) leaves its rows to the others instead of holding everyone up.
    const int n_tasks = (int)std::max<int64_t>(1, std::min<int64_t>((M + 3) / 4, pool.size() * kTasksPerThread));
    auto rows_of = [M](int i, int nt, int64_t* r0, int64_t* r1) {
        const int64_t per = ((M + nt - 1) / nt + 3) & ~(int64_t)3;
        *r0 = std::min(M, per * i);
        *r1 = std::min(M, *r0 + per);
    };

    // Prompt chunks: the ISA's tiled kernel, whose results are bit-identical to the vec_dots.
    if (wk.gemm && n >= kGemmMinTokens) {
        const GemmFn gemm = wk.gemm;
        // A panel-packing task repacks the activations: fewer, larger tasks for prompt chunks.
        const int gemm_tasks = std::min(n_tasks, 2 * pool.size());
        pool.run([&](int ith, int nth) {
            int64_t r0, r1;
            rows_of(ith, nth, &r0, &r1);
            if (r1 > r0) gemm(K, r1 - r0, n, W.row(r0), W.row_bytes, act, act_row, y + r0, M);
        }, gemm_tasks);
        return;
    }

    // One vec_dot per output. For a batch, rows are taken in small tiles so a tile stays in
    // L1/L2 while every activation row passes over it.
    constexpr int64_t kRowTile = 16;
    // llama.cpp repacks such weights into interleaved 8-row blocks at load time (ggml-cpu's
    // CPU_REPACK buffer) and multiplies them with its GEMV/GEMM; the per-row dot in that order
    // gives the same floats without moving the memory.
    // Its GEMM takes the activation rows in whole groups of 4, the GEMV the n % 4 left over.
    const bool repacked = wk.vec_dot_repacked && M % 8 == 0;
    const bool tiled = !repacked && wk.vec_dot_tiled && n >= kTiledMinBatch;
    const VecDotFn dot = repacked ? wk.vec_dot_repacked : tiled ? wk.vec_dot_tiled : wk.vec_dot;
    const VecDotFn dot_gemm = repacked && wk.vec_dot_repacked_gemm ? wk.vec_dot_repacked_gemm : dot;
    const int64_t n_gemm = n - n % 4;
    // The ISA's GEMM in the same order, where it has one, takes the columns that order covers
    // (repacked: the first n_gemm; tiled: all); the per-output calls do the rest.
    const GemmFn gemm_ordered = repacked ? wk.gemm_repacked : tiled ? wk.gemm_tiled : nullptr;
    const int64_t n_ordered = !gemm_ordered ? 0 : repacked ? n_gemm : n;
    const uint8_t* w_end = W.row(M);
    pool.run([&](int ith, int nth) {
        int64_t r0, r1;
        rows_of(ith, nth, &r0, &r1);
        if (n == 1) {  // decode: one pass over the rows, kPrefetchBytes ahead of the dot products
            for (int64_t r = r0; r < r1; ++r) {
                prefetch_span(W.row(r) + kPrefetchBytes, W.row(r + 1) + kPrefetchBytes, w_end);
                dot(K, &y[r], W.row(r), act);
            }
            return;
        }
        if (r1 > r0 && n_ordered > 0)
            gemm_ordered(K, r1 - r0, n_ordered, W.row(r0), W.row_bytes, act, act_row, y + r0, M);
        for (int64_t rt = r0; rt < r1; rt += kRowTile) {
            const int64_t rt_end = std::min(r1, rt + kRowTile);
            for (int64_t t = n_ordered; t < n; ++t) {
                const uint8_t* a = act + t * act_row;
                float* yt = y + t * M;
                const VecDotFn f = t < n_gemm ? dot_gemm : dot;
                for (int64_t r = rt; r < rt_end; ++r) f(K, &yt[r], W.row(r), a);
            }
        }
    }, n_tasks);
}

}  // namespace ei
