// Standalone kernel test: every ISA kernel table this build carries and this CPU runs, checked
// entry by entry against the scalar reference table, without Python. It is how the NEON kernels
// are tested on x86 machines: scripts/test_neon.sh cross-compiles it for AArch64 and runs it
// under qemu user-mode emulation (tests/test_neon_qemu.py runs that script). Built natively on
// x86 with the AVX2/AVX-512 units it checks those too.
//
// Build: the scalar references (quant/ref_*.cpp, cpu/ops_ref.cpp, cpu/gemm.cpp,
// cpu/attn_kvq_ref.cpp), cpu/dispatch.cpp and quant/types.cpp for the baseline target, the ISA
// units with their own flags (as setup.py does), and -DEDGEINFER_HAVE_<ISA> for dispatch.cpp.
//
// What is checked, for every entry of an ISA table t that differs from the scalar table r
// (data from a fixed seed):
//  * from_float (activation quantizers, F16 conversion): the same bytes, on random rows and on
//    edge cases (exact .5 ties, zero blocks, tiny and huge magnitudes). One known exception,
//    printed as KNOWN and not counted: the x86 Q8 quantizers on blocks with amax < 2^-121.
//  * to_float: the same float bits, on random blocks of every type; an entry the ISA table
//    inherits must be the reference's own function (reported as such), never missing.
//  * gemm_16row_groups (the packed GEMV/GEMM over 16-row groups): the reference's bits.
//  * vec_dot: |t - r| <= tol * sum_i |w_i * y_i| (w, y dequantized; tol 1e-5, 4e-6 for the
//    k-quants: the bounds of tests/test_kernels.py, tests/test_kquants.py and
//    tests/test_iquants.py), exactly 0 for zero activations, and on a row whose last weight
//    block and first activation block are all zero (d = 0). Row lengths include odd block counts
//    (96 = 3 blocks of 32, 768 = 3 super-blocks). How many results are bit-identical is
//    reported, not required: the NEON dot products of the legacy and k-quants give the
//    reference's bits as GCC builds both today, but that hangs on how the compiler contracts the
//    reference's float expression; the i-quants follow ggml's float order instead (per pair of
//    blocks, per super-block), so they match the reference's integers but not its rounding.
// One line per check, then "<isa>: N passed, N failed"; the exit code is 1 if anything failed.
// Options: --expect-isa NAME fails unless dispatch selects NAME (the best ISA) on this machine.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/fp16.h"
#include "common/weight_arena.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"
#include "quant/blocks.h"
#include "quant/types.h"

using namespace ei;

namespace {

int g_passed = 0, g_failed = 0;

void report(bool ok, const std::string& what, const std::string& detail) {
    (ok ? g_passed : g_failed)++;
    std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : ": ", detail.c_str());
}

std::mt19937 g_rng(20261122);

float normal(float sigma = 1.0f) { return std::normal_distribution<float>(0.0f, sigma)(g_rng); }
float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g_rng); }

// A random scale for a block's fp16 field: magnitude 1e-3..1e-1, either sign.
uint16_t random_scale() {
    const float m = std::pow(10.0f, uniform(-3.0f, -1.0f));
    return fp32_to_fp16(g_rng() & 1 ? m : -m);
}

// Activations: N(0, 1) with an occasional outlier, as real hidden states have.
std::vector<float> random_floats(int64_t n) {
    std::vector<float> x((size_t)n);
    for (auto& v : x) v = (g_rng() % 64 == 0) ? normal(20.0f) : normal();
    return x;
}

// A row of n elements of `type`: random bytes (every quant bit pattern) with the fp16 scale
// fields replaced by finite random scales; for the float types, finite random values.
std::vector<uint8_t> random_row(uint32_t type, int64_t n) {
    std::vector<uint8_t> raw(row_bytes(type, n));
    for (auto& b : raw) b = (uint8_t)g_rng();
    const int64_t nb = n / type_info(type).block_size;
    auto each = [&](auto* blocks, auto fix) {
        for (int64_t i = 0; i < nb; i++) fix(blocks[i]);
    };
    switch (type) {
        case TYPE_F32: {
            const std::vector<float> v = random_floats(n);
            std::memcpy(raw.data(), v.data(), raw.size());
            break;
        }
        case TYPE_F16: case TYPE_BF16: {
            uint16_t* h = (uint16_t*)raw.data();
            for (int64_t i = 0; i < n; i++) h[i] = type == TYPE_F16 ? fp32_to_fp16(normal()) : fp32_to_bf16(normal());
            break;
        }
        case TYPE_Q4_0: each((block_q4_0*)raw.data(), [](block_q4_0& b) { b.d = random_scale(); }); break;
        case TYPE_Q4_1: each((block_q4_1*)raw.data(), [](block_q4_1& b) { b.d = random_scale(); b.m = random_scale(); }); break;
        case TYPE_Q5_0: each((block_q5_0*)raw.data(), [](block_q5_0& b) { b.d = random_scale(); }); break;
        case TYPE_Q5_1: each((block_q5_1*)raw.data(), [](block_q5_1& b) { b.d = random_scale(); b.m = random_scale(); }); break;
        case TYPE_Q8_0: each((block_q8_0*)raw.data(), [](block_q8_0& b) { b.d = random_scale(); }); break;
        case TYPE_Q8_1: each((block_q8_1*)raw.data(), [](block_q8_1& b) { b.d = random_scale(); b.s = random_scale(); }); break;
        case TYPE_Q2_K: each((block_q2_K*)raw.data(), [](block_q2_K& b) { b.d = random_scale(); b.dmin = random_scale(); }); break;
        case TYPE_Q3_K: each((block_q3_K*)raw.data(), [](block_q3_K& b) { b.d = random_scale(); }); break;
        case TYPE_Q4_K: each((block_q4_K*)raw.data(), [](block_q4_K& b) { b.d = random_scale(); b.dmin = random_scale(); }); break;
        case TYPE_Q5_K: each((block_q5_K*)raw.data(), [](block_q5_K& b) { b.d = random_scale(); b.dmin = random_scale(); }); break;
        case TYPE_Q6_K: each((block_q6_K*)raw.data(), [](block_q6_K& b) { b.d = random_scale(); }); break;
        case TYPE_IQ4_NL: each((block_iq4_nl*)raw.data(), [](block_iq4_nl& b) { b.d = random_scale(); }); break;
        case TYPE_IQ4_XS: each((block_iq4_xs*)raw.data(), [](block_iq4_xs& b) { b.d = random_scale(); }); break;
        // An E8M0 exponent for 2^(e - 128) in 2^-11..2^-4, the magnitudes random_scale gives.
        case TYPE_MXFP4: each((block_mxfp4*)raw.data(), [](block_mxfp4& b) { b.e = (uint8_t)(117 + g_rng() % 8); }); break;
        case TYPE_IQ1_S: each((block_iq1_s*)raw.data(), [](block_iq1_s& b) { b.d = random_scale(); }); break;
        case TYPE_IQ1_M:  // d is the top nibbles of the four 16-bit scale words
            each((block_iq1_m*)raw.data(), [](block_iq1_m& b) {
                const uint16_t d = random_scale();
                for (int k = 0; k < 4; k++) b.scales[2 * k + 1] = (uint8_t)((b.scales[2 * k + 1] & 0x0F) | ((d >> 4 * k) & 15) << 4);
            });
            break;
        case TYPE_TQ1_0: each((block_tq1_0*)raw.data(), [](block_tq1_0& b) { b.d = random_scale(); }); break;
        case TYPE_TQ2_0: each((block_tq2_0*)raw.data(), [](block_tq2_0& b) { b.d = random_scale(); }); break;
        // The lattice i-quants: random grid indices, signs and scales under a random fp16 d (first).
        case TYPE_IQ2_XXS: case TYPE_IQ2_XS: case TYPE_IQ2_S: case TYPE_IQ3_XXS: case TYPE_IQ3_S:
            for (int64_t i = 0; i < nb; i++) {
                const uint16_t d = random_scale();
                std::memcpy(raw.data() + i * type_info(type).type_size, &d, 2);
            }
            break;
        case TYPE_Q8_K:
            each((block_q8_K*)raw.data(), [](block_q8_K& b) {
                b.d = uniform(-0.1f, 0.1f);
                for (auto& q : b.qs) q = (int8_t)(q == -128 ? -127 : q);  // the quantizer's range
                for (int g = 0; g < QK_K / 16; g++) {
                    int s = 0;
                    for (int j = 0; j < 16; j++) s += b.qs[16 * g + j];
                    b.bsums[g] = (int16_t)s;
                }
            });
            break;
        default: break;
    }
    return raw;
}

// The types the tables serve (the later additions appended, each group in ggml id order).
const uint32_t kTypes[] = {TYPE_F32,  TYPE_F16,  TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1,   TYPE_Q8_0,   TYPE_Q8_1,
                           TYPE_Q2_K, TYPE_Q3_K, TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K, TYPE_Q8_K,   TYPE_IQ4_NL, TYPE_IQ4_XS,
                           TYPE_BF16, TYPE_MXFP4, TYPE_IQ1_S, TYPE_IQ1_M, TYPE_TQ1_0, TYPE_TQ2_0,
                           TYPE_IQ2_XXS, TYPE_IQ2_XS, TYPE_IQ3_XXS, TYPE_IQ3_S, TYPE_IQ2_S};

bool is_kquant(uint32_t type) { return type >= TYPE_Q2_K && type <= TYPE_Q6_K; }
bool is_float(uint32_t type) { return type == TYPE_F32 || type == TYPE_F16 || type == TYPE_BF16; }

std::string label(const char* kind, uint32_t type, Isa isa) {
    return std::string(kind) + " " + type_info(type).name + " [" + isa_name(isa) + "]";
}

// ---- from_float ----------------------------------------------------------------------------

// Rows for the quantizers (n a multiple of 256).
struct QuantizerInput {
    const char* name;
    std::vector<float> x;
};

std::vector<QuantizerInput> quantizer_inputs() {
    std::vector<QuantizerInput> rows;
    rows.push_back({"random", random_floats(4096)});
    // amax = 127 makes 127 / amax exactly 1: x * id lands on .5 ties (round half to even);
    // the second block leads with the negative extreme, the third block is all zero.
    std::vector<float> ties(256, 0.0f);
    const float t[] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f, -126.5f, 126.5f};
    for (int j = 0; j < 10; j++) ties[j] = t[j];
    for (int j = 0; j < 10; j++) ties[32 + j] = -t[j];
    rows.push_back({"ties", ties});
    // Blocks of magnitude 2^-118 up to 2^71 (beyond F16's range: inf, as the reference), with
    // exact zeros.
    std::vector<float> scales(2048);
    for (size_t j = 0; j < scales.size(); j++)
        scales[j] = j % 5 == 0 ? 0.0f : normal() * std::ldexp(1.0f, -118 + 3 * (int)(j / 32));
    rows.push_back({"magnitudes", scales});
    return rows;
}

// Blocks with amax < 2^-121, where 127 / amax overflows to inf (and 0 * inf is NaN). d is 0
// once rounded to fp16, so no dot product sees these bytes; they are compared all the same.
QuantizerInput tiny_blocks_input() {
    std::vector<float> x(256);
    for (size_t j = 0; j < x.size(); j++)
        x[j] = j % 5 == 0 ? 0.0f : normal() * std::ldexp(1.0f, -148 + 3 * (int)(j / 32));
    return {"tiny blocks", x};
}

// "" if t's from_float gives r's bytes for every input, else where it first differs.
std::string first_difference(const KernelTable& r, const KernelTable& t, uint32_t type,
                             const std::vector<QuantizerInput>& inputs, int* same) {
    std::string diff;
    *same = 0;
    for (const QuantizerInput& in : inputs) {
        const int64_t n = (int64_t)in.x.size();
        std::vector<uint8_t> a(row_bytes(type, n)), b(row_bytes(type, n));
        r.types[type].from_float(in.x.data(), a.data(), n);
        t.types[type].from_float(in.x.data(), b.data(), n);
        if (a == b) {
            (*same)++;
        } else if (diff.empty()) {
            size_t i = 0;
            while (a[i] == b[i]) i++;
            diff = std::string(in.name) + " byte " + std::to_string(i) + " (" + std::to_string(a[i]) + " vs " +
                   std::to_string(b[i]) + ")";
        }
    }
    return diff;
}

void check_from_float(const KernelTable& r, const KernelTable& t, uint32_t type) {
    if (!t.types[type].from_float || t.types[type].from_float == r.types[type].from_float) return;
    const auto inputs = quantizer_inputs();
    int same;
    std::string diff = first_difference(r, t, type, inputs, &same);
    report(diff.empty(), label("from_float", type, t.isa),
           std::to_string(same) + "/" + std::to_string(inputs.size()) + " rows byte-identical" +
                   (diff.empty() ? "" : ", first difference at " + diff));

    if (type != TYPE_Q8_0 && type != TYPE_Q8_1) return;
    diff = first_difference(r, t, type, {tiny_blocks_input()}, &same);
    const std::string what = label("from_float", type, t.isa) + " amax < 2^-121";
    if (!diff.empty() && (t.isa == Isa::avx2 || t.isa == Isa::avx512)) {
        // ggml's x86 quantizer, which these units reproduce, converts the +inf products with
        // cvtps_epi32 (+inf -> INT_MIN -> -128) where the reference clamps to 127.
        std::printf("KNOWN %s: differs at %s (x86 cvtps_epi32 turns +inf into -128; not counted)\n", what.c_str(),
                    diff.c_str());
        return;
    }
    report(diff.empty(), what, diff.empty() ? "byte-identical" : "first difference at " + diff);
}

// ---- to_float ------------------------------------------------------------------------------

void check_to_float(const KernelTable& r, const KernelTable& t, uint32_t type) {
    if (!r.types[type].to_float) return;
    if (t.types[type].to_float == r.types[type].to_float) {
        // Inherited: dequantization (and matmul's fallbacks that use it) runs the reference itself.
        report(true, label("to_float", type, t.isa), "the scalar reference's (inherited)");
        return;
    }
    if (!t.types[type].to_float) {
        report(false, label("to_float", type, t.isa), "missing where the reference has one");
        return;
    }
    const int64_t n = 4096;
    int same = 0;
    const int rows = 8;
    for (int k = 0; k < rows; k++) {
        const std::vector<uint8_t> raw = random_row(type, n);
        std::vector<float> a((size_t)n), b((size_t)n);
        r.types[type].to_float(raw.data(), a.data(), n);
        t.types[type].to_float(raw.data(), b.data(), n);
        same += std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    }
    report(same == rows, label("to_float", type, t.isa), std::to_string(same) + "/" + std::to_string(rows) + " rows bit-identical");
}

// ---- vec_dot -------------------------------------------------------------------------------

void check_vec_dot(const KernelTable& r, const KernelTable& t, uint32_t type) {
    if (!t.types[type].vec_dot || t.types[type].vec_dot == r.types[type].vec_dot) return;
    const uint32_t act = r.types[type].vec_dot_type;
    const int64_t bs = type_info(type).block_size;
    std::vector<int64_t> sizes;
    if (is_float(type)) sizes = {1, 7, 16, 33, 100, 1000, 2048};
    else if (bs == QK_K) sizes = {256, 768, 4096};  // k-quants, IQ4_XS, IQ1, TQ
    else sizes = {32, 96, 256, 4096};
    const double tol = is_kquant(type) ? 4e-6 : 1e-5;
    for (int64_t n : sizes) {
        if (n % bs) continue;
        const int rows = 16;
        int identical = 0, within = 0;
        double worst = 0.0;  // max |t - r| / sum |w y|
        for (int k = 0; k < rows; k++) {
            std::vector<uint8_t> w = random_row(type, n);
            std::vector<float> x = random_floats(n);
            if (k == 0) std::fill(x.begin(), x.end(), 0.0f);  // zero activations give exactly 0
            if (k == 1 && !is_float(type)) {
                // An all-zero weight block (every byte 0, so d = 0) as the last one, where an odd
                // block count's tail is, and an all-zero first activation block (d = 0 too).
                const size_t wb = type_info(type).type_size;
                std::fill(w.end() - (std::ptrdiff_t)wb, w.end(), (uint8_t)0);
                std::fill(x.begin(), x.begin() + type_info(act).block_size, 0.0f);
            }
            std::vector<uint8_t> y(row_bytes(act, n));
            r.types[act].from_float(x.data(), y.data(), n);
            std::vector<float> wf((size_t)n), yf((size_t)n);
            r.types[type].to_float(w.data(), wf.data(), n);
            r.types[act].to_float(y.data(), yf.data(), n);
            double scale = 0.0;
            for (int64_t i = 0; i < n; i++) scale += std::fabs((double)wf[i] * (double)yf[i]);
            float a = 0.0f, b = 0.0f;
            r.types[type].vec_dot(n, &a, w.data(), y.data());
            t.types[type].vec_dot(n, &b, w.data(), y.data());
            const double diff = std::fabs((double)a - (double)b);
            identical += std::memcmp(&a, &b, 4) == 0;
            within += diff <= tol * scale && (k != 0 || b == 0.0f);
            if (scale > 0) worst = std::max(worst, diff / scale);
        }
        char detail[200];
        std::snprintf(detail, sizeof detail, "%d/%d within %.0e * sum|w*y| (max dev %.2e), %d/%d bit-identical",
                      within, rows, tol, worst, identical, rows);
        report(within == rows, label("vec_dot", type, t.isa) + " n=" + std::to_string(n), detail);
    }
}

// ---- gemm_16row_groups (the packed GEMV/GEMM, cpu/repack.h) ---------------------------------
// Every table's packed kernels compute the scalar reference's float order, so the results must
// be its bits: random rows repacked, 1 to 9 activation columns (the panels and their tails).

void check_packed(const KernelTable& r, const KernelTable& t, uint32_t type) {
    const GemmFn ours = t.types[type].gemm_16row_groups, ref = r.types[type].gemm_16row_groups;
    if (!ours || ours == ref || !ref) return;
    const uint32_t act = r.types[type].vec_dot_type;
    const int64_t bs = type_info(type).block_size, m = 3 * kPackRows;
    for (int64_t k : {bs, 3 * bs, 576 / bs * bs}) {
        if (k == 0 || !packed_layout_supported(type, m, k)) continue;
        std::vector<uint8_t> rows;
        for (int64_t j = 0; j < m; ++j) {
            const std::vector<uint8_t> row = random_row(type, k);
            rows.insert(rows.end(), row.begin(), row.end());
        }
        const size_t group = packed_group_bytes(type, k);
        // 64-byte aligned, as the loader's (the x86 kernels load whole aligned lines)
        const std::shared_ptr<uint8_t> packed = alloc_weight_bytes(group * (size_t)(m / kPackRows));
        repack_rows(type, rows.data(), row_bytes(type, k), m, k, packed.get());
        for (int64_t n : {1, 2, 3, 5, 9}) {
            const size_t a_row = row_bytes(act, k);
            std::vector<uint8_t> acts(a_row * (size_t)n);
            for (int64_t c = 0; c < n; ++c) {
                std::vector<float> x = random_floats(k);
                if (c == 1) std::fill(x.begin(), x.begin() + type_info(act).block_size, 0.0f);  // a d = 0 block
                r.types[act].from_float(x.data(), acts.data() + c * a_row, k);
            }
            std::vector<float> a((size_t)(m * n)), b((size_t)(m * n));
            ref(k, m, n, packed.get(), group, acts.data(), a_row, a.data(), m);
            ours(k, m, n, packed.get(), group, acts.data(), a_row, b.data(), m);
            int same = 0;
            for (size_t i = 0; i < a.size(); ++i) same += std::memcmp(&a[i], &b[i], 4) == 0;
            report(same == (int)a.size(),
                   label("gemm_16row_groups", type, t.isa) + " k=" + std::to_string(k) + " n=" + std::to_string(n),
                   std::to_string(same) + "/" + std::to_string(a.size()) + " outputs bit-identical");
        }
    }
}

void check_table(Isa isa) {
    const KernelTable& r = kernels_for(Isa::scalar);
    const KernelTable& t = kernels_for(isa);
    const int before = g_failed + g_passed, failed_before = g_failed;
    std::string overridden;
    for (uint32_t type : kTypes) {
        const TypeKernels &a = r.types[type], &b = t.types[type];
        if (a.to_float != b.to_float) overridden += std::string(" to_float:") + type_info(type).name;
        if (a.from_float != b.from_float) overridden += std::string(" from_float:") + type_info(type).name;
        if (a.vec_dot != b.vec_dot) overridden += std::string(" vec_dot:") + type_info(type).name;
        if (b.gemm_16row_groups && a.gemm_16row_groups != b.gemm_16row_groups)
            overridden += std::string(" packed:") + type_info(type).name;
    }
    std::printf("== %s overrides:%s\n", isa_name(isa), overridden.empty() ? " nothing" : overridden.c_str());
    for (uint32_t type : kTypes) {
        check_from_float(r, t, type);
        check_to_float(r, t, type);
        check_vec_dot(r, t, type);
        check_packed(r, t, type);
    }
    // The fast float order's tables add packed kernels for the types whose vec_dot order they
    // leave (cpu/repack.h); the ones both orders share were checked above.
    const KernelTable& rf = kernels_for(Isa::scalar, FloatOrder::fast);
    const KernelTable& tf = kernels_for(isa, FloatOrder::fast);
    for (uint32_t type : kTypes)
        if (tf.types[type].gemm_16row_groups != t.types[type].gemm_16row_groups) check_packed(rf, tf, type);
    const int failed = g_failed - failed_before;
    std::printf("%s: %d passed, %d failed\n", isa_name(isa), g_failed + g_passed - before - failed, failed);
}

}  // namespace

int main(int argc, char** argv) {
    std::string expect;
    for (int i = 1; i < argc; i++) {
        if (std::string(argv[i]) == "--expect-isa" && i + 1 < argc) {
            expect = argv[++i];
        } else {
            std::fprintf(stderr, "usage: %s [--expect-isa scalar|avx2|avx512|neon]\n", argv[0]);
            return 2;
        }
    }
    try {
        const Isa selected = selected_isa();
        if (!expect.empty())
            report(expect == isa_name(selected), "dispatch selects " + expect, std::string("selected ") + isa_name(selected));
        else
            std::printf("== dispatch selects %s\n", isa_name(selected));
        for (Isa isa : {Isa::avx2, Isa::avx512, Isa::neon})
            if (isa_available(isa)) check_table(isa);
    } catch (const std::exception& e) {
        report(false, "kernel tables", e.what());
    }
    std::printf("kernel_test: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 && g_passed > 0 ? 0 : 1;
}
