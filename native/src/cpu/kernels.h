// The per-type kernel table (ggml's "type traits"): how to turn a row of each weight type into
// floats, how to quantize activations into the type its dot product wants, and the dot product.
// Every entry has a scalar reference (quant/ref_*.cpp); each ISA unit (cpu/x86/avx2.cpp, ...)
// overrides the entries it accelerates. One table is selected at start-up (cpu/dispatch.cpp).
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace ei {

enum class Isa : int { scalar = 0, avx2 = 1, avx512 = 2, neon = 3 };
const char* isa_name(Isa isa);

// Dequantize n elements (n a multiple of the block size) from a row of blocks to floats.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Quantize n floats into a row of blocks of this type (n a multiple of the block size).
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// *s = dot(x, y) over n elements; x is a row of the weight type, y a row of its vec_dot_type.
using VecDotFn = void (*)(int64_t n, float* s, const void* x, const void* y);

struct TypeKernels {
    ToFloatFn to_float = nullptr;
    FromFloatFn from_float = nullptr;  // set for types that activations are quantized into
    VecDotFn vec_dot = nullptr;        // set for types usable as matmul weights
    uint32_t vec_dot_type = TYPE_F32;  // the type activations are converted to for vec_dot
};

struct KernelTable {
    Isa isa = Isa::scalar;
    TypeKernels types[TYPE_COUNT];
};

// The reference table: plain C++, exact ggml semantics. Always available.
void fill_kernels_scalar(KernelTable& t);
// Each ISA unit overrides what it accelerates (only linked in when built for that architecture).
void fill_kernels_avx2(KernelTable& t);
void fill_kernels_avx512(KernelTable& t);
void fill_kernels_neon(KernelTable& t);

// The best ISA this CPU runs, lowered by EDGEINFER_ISA if set (read once).
Isa selected_isa();
// True if this build has the ISA's kernels and this CPU can run them.
bool isa_available(Isa isa);
// Table for `isa` (built once, cached). Throws ei::Error if !isa_available(isa).
const KernelTable& kernels_for(Isa isa);
// Table for selected_isa().
const KernelTable& kernels();

}  // namespace ei
