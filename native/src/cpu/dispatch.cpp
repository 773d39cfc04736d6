// Run-time choice of the kernel table: which ISAs this build carries, which of them this CPU
// and OS can run (CPUID feature bits plus XGETBV for the register state the OS saves), and the
// EDGEINFER_ISA override. The environment is read once; a bad override is reported as an
// ei::Error at first use rather than ignored, so a benchmark never silently measures the wrong
// kernels.
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>

#include "common/error.h"
#include "cpu/kernels.h"
#include "cpu/repack.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ei {

namespace {

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon};

struct CpuFeatures {
    bool avx2 = false;    // AVX2 + FMA + F16C, YMM state enabled by the OS
    bool avx512 = false;  // AVX-512 F/BW/VL/DQ/VNNI, ZMM and opmask state enabled by the OS
    bool neon = false;    // AArch64 Advanced SIMD with the dot-product extension
    bool amd = false;     // vendor "AuthenticAMD"
};

#if defined(__x86_64__) || defined(__i386__)
uint64_t read_xcr0() {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

CpuFeatures detect_cpu() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
    f.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = read_xcr0();
    const bool ymm_state = (xcr0 & 0x6) == 0x6;             // XMM | YMM
    const bool zmm_state = ymm_state && (xcr0 & 0xE0) == 0xE0;  // opmask | ZMM_Hi256 | Hi16_ZMM
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    const bool avx2 = b & (1u << 5);
    const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
               avx512vl = b & (1u << 31), avx512vnni = c & (1u << 11);
    f.avx2 = ymm_state && avx2 && fma && f16c;
    f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni;
#if defined(EDGEINFER_AVX512_EMULATED)
    f.avx512 = f.avx2;  // a test build whose AVX-512 units run on AVX2 (setup.py, EMULATE_AVX512)
#endif
#elif defined(__aarch64__)
#if defined(__linux__)
    f.neon = (getauxval(AT_HWCAP) & (1ul << 20)) != 0;  // HWCAP_ASIMDDP
#elif defined(__APPLE__)
    f.neon = true;  // every Apple arm64 CPU has the dot-product extension
#endif
#endif
    return f;
}

const CpuFeatures& cpu() {
    static const CpuFeatures f = detect_cpu();
    return f;
}

#if defined(EDGEINFER_HAVE_AVX2) && defined(EDGEINFER_HAVE_AVX512)
// On AMD's Zen 4 the AVX2 table's packed GEMVs stream a one-token matmul's weights faster than the
// AVX-512 table's (docs/PERFORMANCE.md, "Measurements behind code choices"; the AVX-512 kernels'
// one 64-byte load a line, where the AVX2 kernels make two of 32, is part of it). In FloatOrder::fast every
// ISA's packed kernels give the scalar reference's bits over the same layout, so the tables can
// share them; prompts and decode batches keep the AVX-512 kernels (VNNI pays once a group serves
// several columns). Q5_0, Q5_1, Q2_K and Q3_K keep their AVX-512 GEMV: the AVX2 one is bound by its
// own work (Q5's fifth bits cost more than the products, Q2_K's and Q3_K's few bits a value take
// more work a byte; scripts/stream_packed_gemv.py shows it), the AVX-512 one computes well over
// its rate and streams faster. Intel's AVX-512 decode has not been compared: it keeps its own.
bool avx2_gemv_bound_by_its_work(uint32_t type) {
    return packed_has_fifth_bits(type) || type == TYPE_Q2_K || type == TYPE_Q3_K;
}

void take_avx2_one_token_gemvs(KernelTable& t) {
    KernelTable avx2;
    fill_gemm_packed_avx2(avx2);
    fill_gemm_packed_fast_avx2(avx2);
    for (size_t i = 0; i < std::size(t.types); ++i)
        if (!avx2_gemv_bound_by_its_work((uint32_t)i) && t.types[i].gemm_16row_groups &&
            avx2.types[i].gemm_16row_groups)
            t.types[i].gemm_16row_groups_one_token = avx2.types[i].gemm_16row_groups;
}
#endif

bool isa_built(Isa isa) {
    switch (isa) {
        case Isa::scalar: return true;
#if defined(EDGEINFER_HAVE_AVX2)
        case Isa::avx2: return true;
#endif
#if defined(EDGEINFER_HAVE_AVX512)
        case Isa::avx512: return true;
#endif
#if defined(EDGEINFER_HAVE_NEON)
        case Isa::neon: return true;
#endif
        default: return false;
    }
}

bool cpu_runs(Isa isa) {
    switch (isa) {
        case Isa::scalar: return true;
        case Isa::avx2: return cpu().avx2;
        case Isa::avx512: return cpu().avx512;
        case Isa::neon: return cpu().neon;
    }
    return false;
}

Isa best_isa() {
    Isa best = Isa::scalar;
    for (Isa isa : kAllIsas)
        if (isa_available(isa) && isa != Isa::neon && (int)isa > (int)best) best = isa;
    if (isa_available(Isa::neon)) best = Isa::neon;
    return best;
}

// The outcome of reading EDGEINFER_ISA, decided once.
struct Selection {
    Isa isa = Isa::scalar;
    std::string error;  // non-empty: the override could not be honoured
};

Selection select_isa() {
    Selection s;
    s.isa = best_isa();
    const char* env = std::getenv("EDGEINFER_ISA");
    if (!env || !*env) return s;
    const std::string want = env;
    for (Isa isa : kAllIsas) {
        if (want != isa_name(isa)) continue;
        if (!isa_available(isa))
            s.error = "EDGEINFER_ISA=" + want + ": this " +
                      (isa_built(isa) ? std::string("CPU cannot run it") : std::string("build does not include it")) +
                      " (best available: " + isa_name(s.isa) + ")";
        else
            s.isa = isa;
        return s;
    }
    s.error = "EDGEINFER_ISA=" + want + ": unknown instruction set (expected scalar, avx2, avx512 or neon)";
    return s;
}

KernelTable build_table(Isa isa, FloatOrder order) {
    KernelTable t;
    fill_kernels_scalar(t);
    fill_attn_kvq_scalar(t.ops);
    // gemm entries are per ISA (a scalar one left in another ISA's table would bypass its
    // vec_dots): the scalar references, or the ISA's own tiled kernels, or none.
    switch (isa) {
        case Isa::scalar:
            fill_gemm_scalar(t);
            fill_gemm_packed_scalar(t);
            break;
#if defined(EDGEINFER_HAVE_AVX2)
        case Isa::avx2:
            fill_kernels_avx2(t);
            fill_ops_avx2(t.ops);
            fill_attn_kvq_fma(t.ops);
            fill_attn_kvq_avx2(t.ops);
            fill_gemm_avx2(t);
            fill_gemm_kquants_avx2(t);
            fill_gemm_packed_avx2(t);
            fill_attn_prefill_avx2(t.ops);
            fill_attn_span_f16_avx2(t.ops);
            break;
#endif
#if defined(EDGEINFER_HAVE_AVX512)
        case Isa::avx512:
            fill_kernels_avx512(t);
            fill_ops_avx512(t.ops);
            fill_attn_kvq_fma(t.ops);
            fill_attn_kvq_avx2(t.ops);  // AVX2 code, as the F16 span kernel below
            fill_gemm_avx512(t);
            fill_gemm_kquants_avx512(t);
            fill_gemm_packed_avx512(t);
            fill_attn_prefill_avx512(t.ops);
            fill_attn_span_f16_avx2(t.ops);  // AVX2 code: the same bits as the AVX2 table's
            break;
#endif
#if defined(EDGEINFER_HAVE_NEON)
        case Isa::neon: fill_kernels_neon(t); break;
#endif
        default: break;
    }
    if (order == FloatOrder::fast) {
        switch (isa) {
            case Isa::scalar: fill_gemm_packed_fast_scalar(t); break;
#if defined(EDGEINFER_HAVE_AVX2)
            case Isa::avx2: fill_gemm_packed_fast_avx2(t); break;
#endif
#if defined(EDGEINFER_HAVE_AVX512)
            case Isa::avx512:
                fill_gemm_packed_fast_avx512(t);
#if defined(EDGEINFER_HAVE_AVX2)
                if (cpu().amd) take_avx2_one_token_gemvs(t);
#endif
                break;
#endif
#if defined(EDGEINFER_HAVE_NEON)
            case Isa::neon: fill_gemm_packed_fast_neon(t); break;
#endif
            default: break;
        }
    }
    t.isa = isa;
    t.order = order;
    return t;
}

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx512: return "avx512";
        case Isa::neon: return "neon";
    }
    return "unknown";
}

bool isa_available(Isa isa) { return isa_built(isa) && cpu_runs(isa); }

Isa selected_isa() {
    static const Selection s = select_isa();
    if (!s.error.empty()) throw Error(s.error);
    return s.isa;
}

const char* float_order_name(FloatOrder order) { return order == FloatOrder::fast ? "fast" : "llama.cpp"; }

FloatOrder default_float_order() {
    static const FloatOrder order = [] {
        const char* env = std::getenv("EDGEINFER_EXACT");
        return env && std::string(env) == "1" ? FloatOrder::llama_cpp : FloatOrder::fast;
    }();
    return order;
}

const KernelTable& kernels_for(Isa isa, FloatOrder order) {
    const int i = (int)isa, o = (int)order;
    if (i < 0 || i >= 4 || !isa_available(isa))
        throw Error(std::string("instruction set ") + isa_name(isa) + " is not available on this machine/build");
    static KernelTable tables[4][2];
    static std::once_flag built[4][2];
    std::call_once(built[i][o], [&] { tables[i][o] = build_table(isa, order); });
    return tables[i][o];
}

const KernelTable& kernels() { return kernels_for(selected_isa(), default_float_order()); }

}  // namespace ei
