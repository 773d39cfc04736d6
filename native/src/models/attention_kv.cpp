// Attention over the KV cache whatever its K/V types (blocks.h, attention_cached).
#include <string>
#include <vector>

#include "common/error.h"
#include "kv/hadamard.h"
#include "models/arch.h"
#include "models/blocks.h"

namespace ei {

void ArchModel::rotate_cached_keys(const KernelTable&, int64_t, float*, int64_t, int32_t) const {
    throw Error("context shift is not supported for the " + hparams().arch + " architecture");
}

void attention_cached(ThreadPool& pool, const KernelTable& kt, const float* q, int64_t n, int64_t pos0,
                      const KvCache& kv, int64_t layer, const AttentionShape& s, float* out) {
    // A rotated K holds R k: the scores need R q (kv/hadamard.h). [n][n_head][head_dim]
    std::vector<float> q_rotated;
    if (kv.k_rotated()) {
        q_rotated.assign(q, q + n * s.n_head * s.head_dim);
        hadamard_rotate(q_rotated.data(), n * s.n_head, s.head_dim);
        q = q_rotated.data();
    }
    if (kv.type_k() == TYPE_F16 && kv.type_v() == TYPE_F16) {
        attention_f16(pool, kt, q, n, pos0, reinterpret_cast<const uint16_t*>(kv.k_data(layer)),
                      reinterpret_cast<const uint16_t*>(kv.v_data(layer)), s, out);
        return;
    }
    // ggml's one-row kernel with a quantized K and/or V. (With an F16 V ggml accumulates in F16;
    // here every non-F16-pair goes through the F32 accumulator: F16 V rows are converted.)
    const TypeKernels& tk = kt.types[kv.type_k()];
    const AttnKvTypes types{kt.types[tk.vec_dot_type].from_float, tk.vec_dot, kt.types[kv.type_v()].to_float,
                            kv.type_v()};
    if (!types.q_to_k || !types.kq_dot || !types.v_to_float || !kt.ops.attn_kvq_row)
        throw Error(std::string("no attention kernels for KV types ") + kv_type_name(kv.type_k()) + "/" +
                    kv_type_name(kv.type_v()));
    if (s.head_dim % type_info(kv.type_k()).block_size || s.head_dim % type_info(kv.type_v()).block_size)
        throw Error("a quantized KV cache needs head_dim to be a multiple of its block size");
    const size_t k_head = row_bytes(kv.type_k(), s.head_dim), v_head = row_bytes(kv.type_v(), s.head_dim);
    const uint8_t* k = kv.k_data(layer);
    const uint8_t* v = kv.v_data(layer);
    const int64_t group = s.n_head / s.n_head_kv;
    const int64_t jobs = n * s.n_head;
    const AttnKvqRowFn attend = kt.ops.attn_kvq_row;
    pool.run([&](int ith, int nth) {
        std::vector<float> scratch(3 * s.head_dim);
        int64_t j0, j1;
        ThreadPool::split(jobs, ith, nth, &j0, &j1);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t t = j / s.n_head, h = j % s.n_head, hk = h / group;
            const int64_t last = pos0 + t;
            const int64_t first = s.window > 0 && last - s.window + 1 > 0 ? last - s.window + 1 : 0;
            const int64_t off = (t * s.n_head + h) * s.head_dim;
            attend(q + off, k + hk * k_head, v + hk * v_head, kv.k_row_bytes(), kv.v_row_bytes(), first, last,
                   s.head_dim, s.scale, types, scratch.data(), out + off);
        }
    });
}

}  // namespace ei
