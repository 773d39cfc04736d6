// Dispatch and threading of the weight quantizers (quant/quantize.h).
#include "quant/quantize.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "common/thread_pool.h"
#include "quant/ref.h"
#include "quant/types.h"

namespace ei {

QuantizeRowFn quantize_row_fn(uint32_t type) {
    switch (type) {
        case TYPE_F32: return ref::from_float_f32;
        case TYPE_F16: return ref::from_float_f16;
        case TYPE_BF16: return ref::from_float_bf16;
        case TYPE_Q4_0: return qref::quantize_row_q4_0;
        case TYPE_Q4_1: return qref::quantize_row_q4_1;
        case TYPE_Q5_0: return qref::quantize_row_q5_0;
        case TYPE_Q5_1: return qref::quantize_row_q5_1;
        case TYPE_Q8_0: return qref::quantize_row_q8_0;
        case TYPE_Q2_K: return qref::quantize_row_q2_K;
        case TYPE_Q3_K: return qref::quantize_row_q3_K;
        case TYPE_Q4_K: return qref::quantize_row_q4_K;
        case TYPE_Q5_K: return qref::quantize_row_q5_K;
        case TYPE_Q6_K: return qref::quantize_row_q6_K;
        case TYPE_IQ4_NL: return qref::quantize_row_iq4_nl;
        case TYPE_IQ4_XS: return qref::quantize_row_iq4_xs;
        case TYPE_IQ3_XXS: return qref::quantize_row_iq3_xxs;
        case TYPE_IQ3_S: return qref::quantize_row_iq3_s;
        case TYPE_MXFP4: return qref::quantize_row_mxfp4;
        case TYPE_TQ1_0: return qref::quantize_row_tq1_0;
        case TYPE_TQ2_0: return qref::quantize_row_tq2_0;
        case TYPE_IQ2_S: return qref::quantize_row_iq2_s;
        case TYPE_IQ1_M: return qref::quantize_row_iq1_m;
        default: return nullptr;
    }
}

QuantizeRowImatrixFn quantize_row_imatrix_fn(uint32_t type) {
    switch (type) {
        case TYPE_Q4_0: return qref::quantize_row_q4_0_imatrix;
        case TYPE_Q4_1: return qref::quantize_row_q4_1_imatrix;
        case TYPE_Q5_0: return qref::quantize_row_q5_0_imatrix;
        case TYPE_Q5_1: return qref::quantize_row_q5_1_imatrix;
        case TYPE_Q2_K: return qref::quantize_row_q2_K_imatrix;
        case TYPE_Q3_K: return qref::quantize_row_q3_K_imatrix;
        case TYPE_Q4_K: return qref::quantize_row_q4_K_imatrix;
        case TYPE_Q5_K: return qref::quantize_row_q5_K_imatrix;
        case TYPE_Q6_K: return qref::quantize_row_q6_K_imatrix;
        case TYPE_IQ4_NL: return qref::quantize_row_iq4_nl_imatrix;
        case TYPE_IQ4_XS: return qref::quantize_row_iq4_xs_imatrix;
        case TYPE_IQ2_XXS: return qref::quantize_row_iq2_xxs_imatrix;
        case TYPE_IQ2_XS: return qref::quantize_row_iq2_xs_imatrix;
        case TYPE_IQ2_S: return qref::quantize_row_iq2_s_imatrix;
        case TYPE_IQ1_S: return qref::quantize_row_iq1_s_imatrix;
        case TYPE_IQ1_M: return qref::quantize_row_iq1_m_imatrix;
        case TYPE_IQ3_XXS: return qref::quantize_row_iq3_xxs_imatrix;
        case TYPE_IQ3_S: return qref::quantize_row_iq3_s_imatrix;
        default: return nullptr;
    }
}

bool quantizer_uses_imatrix(uint32_t type) { return quantize_row_imatrix_fn(type) != nullptr; }

bool has_quantizer(uint32_t type) { return quantize_row_fn(type) || quantize_row_imatrix_fn(type); }

bool quantizer_needs_imatrix(uint32_t type) { return !quantize_row_fn(type) && quantize_row_imatrix_fn(type); }

void quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n_per_row, int n_threads,
                   const float* imatrix) {
    const QuantizeRowFn fn = quantize_row_fn(type);
    const QuantizeRowImatrixFn fn_imatrix = imatrix ? quantize_row_imatrix_fn(type) : nullptr;
    if (!has_quantizer(type)) {
        const char* name = type_known(type) ? type_info(type).name : "unknown";
        throw Error(std::string("no quantizer for type ") + name + " (id " + std::to_string(type) + ")");
    }
    const TypeInfo& ti = type_info(type);
    if (!fn && !fn_imatrix)
        throw Error(std::string("quantizing to ") + ti.name + " needs importance weights (an imatrix): its "
                    "quantizer fits the grid to them and has no unweighted form");
    if (n_per_row <= 0 || n_per_row % ti.block_size != 0)
        throw Error("row length " + std::to_string(n_per_row) + " is not a multiple of the " + ti.name +
                    " block size " + std::to_string(ti.block_size));
    const size_t row_size = row_bytes(type, n_per_row);
    auto run = [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* x = src + r * n_per_row;
            void* y = (uint8_t*)dst + (size_t)r * row_size;
            if (fn_imatrix) fn_imatrix(x, y, n_per_row, imatrix);
            else fn(x, y, n_per_row);
        }
    };
    if (n_threads <= 1 || nrows < 2) {
        run(0, nrows);
        return;
    }
    // Many more tasks than threads, so a thread the OS delays does not hold up the rest.
    ThreadPool pool(n_threads);
    const int n_tasks = (int)std::min<int64_t>(nrows, (int64_t)n_threads * 16);
    pool.run([&](int i, int n) {
        int64_t r0, r1;
        ThreadPool::split(nrows, i, n, &r0, &r1);
        run(r0, r1);
    }, n_tasks);
}

}  // namespace ei
