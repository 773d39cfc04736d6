#include "cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "cpu/repack.h"

namespace ei {

namespace {
// Below this many tokens the per-token vec_dots win (the GEMM pads columns to panels of 8; a
// 4-row interleaved one-column kernel was tried for decode and was slower, docs/PERFORMANCE.md).
constexpr int64_t kGemmMinTokens = 4;
// From this many activation rows ggml-cpu multiplies k-quant weights it has not repacked with
// its tiled GEMM (tiled.cpp), whose float order vec_dot_ggml_tiled reproduces.
constexpr int64_t kTiledMinBatch = 8;
// Row tasks per pool thread (dynamic balancing; each task costs one atomic claim).
constexpr int64_t kTasksPerThread = 4;
// How far ahead of the row being multiplied a decode requests the weight bytes it will need.
// A one-token matmul streams every weight row once from DRAM, and the hardware prefetcher alone
// keeps too few lines in flight while the core is busy with the dot products, so the GEMV waits on
// memory; requesting the next few KiB explicitly keeps more in flight (docs/PERFORMANCE.md). A
// prefetch changes no result.
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

namespace {

// How a matmul runs, chosen once from the weight's type, layout and the batch (plan_matmul).
// Every plan gives the same floats as llama.cpp's CPU backend gives for that weight and batch.
struct MatmulPlan {
    enum Kind {
        packed_groups,  // weights repacked at load into 16-row groups: the packed GEMV/GEMM
        tiled_gemm,     // a prompt chunk through the ISA's tiled GEMM (vec_dot's bits)
        ggml_order,     // one dot per output in the order ggml's repacked or tiled GEMM sums in,
                        // the columns that order's GEMM covers through it
        small_batch,    // a decode batch: the weights streamed once for every row, vec_dot's bits
        row_dots,       // one vec_dot per output (decode, and what has no GEMM)
    } kind;
    GemmFn batch_gemm = nullptr;   // small_batch: gemm_small_batch or its ggml-repack-order twin
    VecDotFn dot = nullptr;        // ggml_order / row_dots: the per-output dot
    VecDotFn dot_grouped = nullptr;  // ggml_order: the dot of the columns in ggml's 4-row groups
    GemmFn order_gemm = nullptr;   // ggml_order: the GEMM in that order, or null
    int64_t n_grouped = 0;         // ggml_order: columns in ggml's 4-row groups (n - n % 4)
    int64_t n_by_gemm = 0;         // ggml_order: leading columns order_gemm takes
};

MatmulPlan plan_matmul(const TypeKernels& wk, const Tensor& W, int64_t n, BatchOrder order) {
    // The packed kernels have one float chain per output, whatever the batch.
    if (W.packed && wk.gemm_16row_groups) return {MatmulPlan::packed_groups};
    const bool per_row = order == BatchOrder::per_row;
    // llama.cpp repacks such weights into interleaved 8-row blocks at load time (ggml-cpu's
    // CPU_REPACK buffer) and multiplies them with its GEMV/GEMM; the per-row dot in that order
    // gives the same floats without moving the memory. Its GEMM takes the activation rows in
    // whole groups of 4, the GEMV the n % 4 left over. k-quant weights it has not repacked go
    // through its tiled GEMM from kTiledMinBatch rows.
    const bool repack_order = wk.vec_dot_ggml_repack && W.rows() % 8 == 0;
    const bool tiled_order = !repack_order && wk.vec_dot_ggml_tiled && n >= kTiledMinBatch && !per_row;
    if (!repack_order && !tiled_order) {
        // vec_dot's order for any batch: through the kernel that suits the batch's size (a decode
        // batch of any size through the small-batch GEMM, a few rows at a time).
        if (wk.gemm_small_batch && n > 1 && (n <= kSmallBatchMax || per_row))
            return {MatmulPlan::small_batch, wk.gemm_small_batch};
        if (wk.gemm && n >= kGemmMinTokens) return {MatmulPlan::tiled_gemm};
        return {MatmulPlan::row_dots, nullptr, wk.vec_dot};
    }
    // Every row in the repacked GEMV's order (a one-row batch's; llama.cpp's too for fewer than
    // 4 rows): the small-batch GEMM in that order reads the weights once for all of them.
    if (repack_order && (per_row || n < 4) && wk.gemm_small_batch_ggml_repack && n > 1 &&
        (n <= kSmallBatchMax || per_row))
        return {MatmulPlan::small_batch, wk.gemm_small_batch_ggml_repack};
    MatmulPlan p{MatmulPlan::ggml_order};
    p.dot = repack_order ? wk.vec_dot_ggml_repack : wk.vec_dot_ggml_tiled;
    if (per_row) return p;  // every row in the GEMV's order: a one-row batch's
    p.dot_grouped = repack_order && wk.vec_dot_ggml_repack_gemm ? wk.vec_dot_ggml_repack_gemm : p.dot;
    p.n_grouped = n - n % 4;
    p.order_gemm = repack_order ? wk.gemm_ggml_repack : wk.gemm_ggml_tiled;
    p.n_by_gemm = !p.order_gemm ? 0 : repack_order ? p.n_grouped : n;
    return p;
}

// The operands every runner takes: W, the converted activations [n][act_row] and y [n][M].
struct MatmulArgs {
    const Tensor& W;
    const uint8_t* act;
    size_t act_row;
    int64_t n;
    float* y;
};

// Weight rows are cut into tasks of a multiple of 4 rows (the GEMM tiles' height), several per
// thread, taken from the pool's shared counter: a thread that runs late or slow (another process
// on its core) leaves its rows to the others instead of holding everyone up.
int row_tasks(const ThreadPool& pool, int64_t M) {
    return (int)std::max<int64_t>(1, std::min<int64_t>((M + 3) / 4, pool.size() * kTasksPerThread));
}

void task_rows(int64_t M, int i, int nt, int64_t* r0, int64_t* r1) {
    const int64_t per = ((M + nt - 1) / nt + 3) & ~(int64_t)3;
    *r0 = std::min(M, per * i);
    *r1 = std::min(M, *r0 + per);
}

// Cuts `groups` into tasks of decreasing size ("guided"): each takes 1 / (spread x threads) of
// what is left, at least min_groups, into bounds[0..tasks]. The pool hands tasks out in index
// order, so the long ones go first (a thread streams far before it claims again) and the last
// ones are short: a thread that runs out of work waits on the other for one short task at most,
// where equal tasks left it waiting for up to a whole one (docs/PERFORMANCE.md has the
// measurements).
int guided_tasks(int64_t groups, int threads, int64_t min_groups, int spread, std::vector<int64_t>& bounds) {
    bounds.assign(1, 0);
    if (threads < 2 || groups <= 0) bounds.push_back(std::max<int64_t>(groups, 0));  // nothing to balance
    for (int64_t left = groups - bounds.back(); left > 0;) {
        const int64_t take = std::min(left, std::max(min_groups, left / ((int64_t)spread * threads)));
        bounds.push_back(bounds.back() + take);
        left -= take;
    }
    return (int)bounds.size() - 1;
}

// The packed GEMV/GEMM, split by 16-row groups into guided tasks (a prompt's at least
// kPrefillTaskGroups groups, each task preparing every column's block scales once), for one
// weight or several over the same activations: their groups laid end to end and split as one
// weight's would be (a task may finish one weight and start the next), so a layer's Q, K and V
// (gate and up) wait on the pool once, not once each.
void run_packed_groups(ThreadPool& pool, const KernelTable& kt, const Tensor* const* W, float* const* y, int count,
                       const uint8_t* act, size_t act_row, int64_t n) {
    // A prompt chunk's tasks are compute-bound and long: a fine split balances them. A decode
    // step's stream the weights, and each task starts a stream of its own (for the prefetchers;
    // its request past its end lands in rows another thread has): halving what is left, down to
    // 4 groups (64 rows), decoded faster than the finer split and than equal halves, which
    // balanced worse (docs/PERFORMANCE.md, "Measurements behind code choices").
    constexpr int64_t kPrefillTaskGroups = 4, kDecodeTaskGroups = 4;
    constexpr int kPrefillSpread = 2, kDecodeSpread = 1;
    int64_t first[kMaxSameInput + 1] = {0};  // first[i]: weight i's first group in the joint order
    for (int i = 0; i < count; ++i) first[i + 1] = first[i] + W[i]->rows() / kPackRows;
    const int64_t groups = first[count];
    std::vector<int64_t> bounds;
    const bool prefill = n >= kGemmMinTokens;
    const int tasks = guided_tasks(groups, pool.size(), prefill ? kPrefillTaskGroups : kDecodeTaskGroups,
                                   prefill ? kPrefillSpread : kDecodeSpread, bounds);
    pool.run([&](int task, int) {
        const int64_t j0 = bounds[task], j1 = bounds[task + 1];
        for (int i = 0; i < count; ++i) {
            const int64_t g0 = std::max(j0, first[i]) - first[i], g1 = std::min(j1, first[i + 1]) - first[i];
            if (g1 <= g0) continue;
            const Tensor& w = *W[i];
            const TypeKernels& wk = kt.types[w.type];
            const GemmFn gemm = n == 1 && wk.gemm_16row_groups_one_token ? wk.gemm_16row_groups_one_token
                                                                         : wk.gemm_16row_groups;
            gemm(w.cols(), (g1 - g0) * kPackRows, n, w.packed.get() + g0 * w.packed_group_bytes, w.packed_group_bytes,
                 act, act_row, y[i] + g0 * kPackRows, w.rows());
        }
    }, tasks);
}

// A prompt chunk through the tiled GEMM; a panel-packing task repacks the activations, so fewer,
// larger tasks.
void run_tiled_gemm(ThreadPool& pool, const TypeKernels& wk, const MatmulArgs& a) {
    const Tensor& W = a.W;
    const int64_t M = W.rows();
    const int tasks = std::min(row_tasks(pool, M), 2 * pool.size());
    pool.run([&](int ith, int nth) {
        int64_t r0, r1;
        task_rows(M, ith, nth, &r0, &r1);
        if (r1 > r0) wk.gemm(W.cols(), r1 - r0, a.n, W.row(r0), W.row_bytes, a.act, a.act_row, a.y + r0, M);
    }, tasks);
}

// A decode batch through the small-batch GEMM: each thread streams its slice of the weights once
// for all the activation rows (several tasks a thread, for balance, as a one-token decode). More
// rows than the GEMM takes go in even groups (9 = 5 + 4: a draft of 8 and its token), each over
// a block of weight rows small enough that the later groups read it from L2, not memory; every
// row keeps vec_dot's bits.
void run_small_batch(ThreadPool& pool, const MatmulPlan& p, const MatmulArgs& a) {
    constexpr size_t kBlockBytes = 256 * 1024;
    const Tensor& W = a.W;
    const int64_t M = W.rows();
    const int64_t groups = (a.n + kSmallBatchMax - 1) / kSmallBatchMax;
    const int64_t block = groups == 1 ? M : std::max<int64_t>(4, (int64_t)(kBlockBytes / W.row_bytes) & ~(int64_t)3);
    pool.run([&](int ith, int nth) {
        int64_t r0, r1;
        task_rows(M, ith, nth, &r0, &r1);
        for (int64_t b0 = r0; b0 < r1; b0 += block) {
            const int64_t b1 = std::min(r1, b0 + block);
            for (int64_t g = 0; g < groups; ++g) {
                const int64_t c0 = a.n * g / groups, c1 = a.n * (g + 1) / groups;
                p.batch_gemm(W.cols(), b1 - b0, c1 - c0, W.row(b0), W.row_bytes, a.act + c0 * a.act_row, a.act_row,
                             a.y + c0 * M + b0, M);
            }
        }
    }, row_tasks(pool, M));
}

// One dot per output. Decode streams each row once, kPrefetchBytes ahead of the dot products; a
// batch takes rows in small tiles so a tile stays in L1/L2 while every activation row passes
// over it, after the columns the plan's GEMM covers.
void run_dots(ThreadPool& pool, const MatmulPlan& p, const MatmulArgs& a) {
    constexpr int64_t kRowTile = 16;
    const Tensor& W = a.W;
    const int64_t K = W.cols(), M = W.rows(), n = a.n;
    const uint8_t* w_end = W.row(M);
    pool.run([&](int ith, int nth) {
        int64_t r0, r1;
        task_rows(M, ith, nth, &r0, &r1);
        if (n == 1) {
            for (int64_t r = r0; r < r1; ++r) {
                prefetch_span(W.row(r) + kPrefetchBytes, W.row(r + 1) + kPrefetchBytes, w_end);
                p.dot(K, &a.y[r], W.row(r), a.act);
            }
            return;
        }
        if (r1 > r0 && p.n_by_gemm > 0)
            p.order_gemm(K, r1 - r0, p.n_by_gemm, W.row(r0), W.row_bytes, a.act, a.act_row, a.y + r0, M);
        for (int64_t rt = r0; rt < r1; rt += kRowTile) {
            const int64_t rt_end = std::min(r1, rt + kRowTile);
            for (int64_t t = p.n_by_gemm; t < n; ++t) {
                const uint8_t* at = a.act + t * a.act_row;
                float* yt = a.y + t * M;
                const VecDotFn f = t < p.n_grouped ? p.dot_grouped : p.dot;
                for (int64_t r = rt; r < rt_end; ++r) f(K, &yt[r], W.row(r), at);
            }
        }
    }, row_tasks(pool, M));
}

}  // namespace

namespace {

// x converted once into W's vec_dot_type, in the scratch (F32 weights use x as it is).
const uint8_t* convert_activations(ThreadPool& pool, const KernelTable& kt, const Tensor& W, const float* x,
                                   int64_t n, MatmulScratch& scratch) {
    const TypeKernels& wk = kt.types[W.type];
    const TypeKernels& ak = kt.types[wk.vec_dot_type];
    if (!wk.vec_dot || (wk.vec_dot_type != TYPE_F32 && !ak.from_float))
        throw Error(std::string("no matmul kernel for weight type ") + type_info(W.type).name);
    if (wk.vec_dot_type == TYPE_F32) return reinterpret_cast<const uint8_t*>(x);
    const int64_t K = W.cols();
    const size_t act_row = row_bytes(wk.vec_dot_type, K);
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
    return dst;
}

void run_matmul(ThreadPool& pool, const KernelTable& kt, const MatmulArgs& args, BatchOrder order) {
    const TypeKernels& wk = kt.types[args.W.type];
    const MatmulPlan plan = plan_matmul(wk, args.W, args.n, order);
    switch (plan.kind) {
        case MatmulPlan::packed_groups: {
            const Tensor* w = &args.W;
            return run_packed_groups(pool, kt, &w, &args.y, 1, args.act, args.act_row, args.n);
        }
        case MatmulPlan::tiled_gemm: return run_tiled_gemm(pool, wk, args);
        case MatmulPlan::small_batch: return run_small_batch(pool, plan, args);
        case MatmulPlan::ggml_order:
        case MatmulPlan::row_dots: return run_dots(pool, plan, args);
    }
}

}  // namespace

void matmul(ThreadPool& pool, const KernelTable& kt, const Tensor& W, const float* x, int64_t n, float* y,
            MatmulScratch& scratch, BatchOrder order) {
    const uint8_t* act = convert_activations(pool, kt, W, x, n, scratch);
    run_matmul(pool, kt, {W, act, matmul_act_row_bytes(kt, W), n, y}, order);
}

void matmul_same_input(ThreadPool& pool, const KernelTable& kt, const Tensor* const* W, float* const* y, int count,
                       const float* x, int64_t n, MatmulScratch& scratch, BatchOrder order) {
    if (count < 1 || count > kMaxSameInput) throw Error("matmul_same_input: 1.." + std::to_string(kMaxSameInput) + " weights");
    bool shared = true, all_packed = true;  // one conversion for all; one pool job for all
    for (int i = 0; i < count; ++i) {
        shared = shared && W[i]->cols() == W[0]->cols() &&
                 kt.types[W[i]->type].vec_dot_type == kt.types[W[0]->type].vec_dot_type;
        all_packed = all_packed && plan_matmul(kt.types[W[i]->type], *W[i], n, order).kind == MatmulPlan::packed_groups;
    }
    if (!shared) {
        for (int i = 0; i < count; ++i) matmul(pool, kt, *W[i], x, n, y[i], scratch, order);
        return;
    }
    const uint8_t* act = convert_activations(pool, kt, *W[0], x, n, scratch);
    const size_t act_row = matmul_act_row_bytes(kt, *W[0]);
    if (all_packed) return run_packed_groups(pool, kt, W, y, count, act, act_row, n);
    for (int i = 0; i < count; ++i) run_matmul(pool, kt, {*W[i], act, act_row, n, y[i]}, order);
}

}  // namespace ei
