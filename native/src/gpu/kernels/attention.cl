// Causal attention over a KV cache kept on the device in F16, Q8_0 or Q4_0.
//   cache K, V: [n_ctx] rows of n_head_kv * head_dim values of their type (k_row_bytes each);
//               F16 rows are halves, quantized rows blocks of 32 (kv_quant.cl stores them)
//   q, out:     [n][n_head][head_dim] floats; query t sits at position pos0 + t
// The types are chosen at build time: -DK_AT=kv_at_<type> -DV_AT=kv_at_<type> (default F16).
// Query head h reads KV head h / (n_head / n_head_kv) (grouped-query attention). window > 0
// limits each query to its last `window` positions (sliding-window layers).

// Element i of a cache row.
inline float kv_at_f16(__global const uchar* row, int i) {
    return vload_half(i, (__global const half*)row);
}
inline float kv_at_q8_0(__global const uchar* row, int i) {
    __global const block_q8_0* b = (__global const block_q8_0*)row + i / QK8_0;
    return vload_half(0, (__global const half*)&b->d) * (float)b->qs[i % QK8_0];
}
inline float kv_at_q4_0(__global const uchar* row, int i) {
    __global const block_q4_0* b = (__global const block_q4_0*)row + i / QK4_0;
    const int j = i % QK4_0;
    const int q = j < QK4_0 / 2 ? (b->qs[j] & 15) : (b->qs[j - QK4_0 / 2] >> 4);
    return vload_half(0, (__global const half*)&b->d) * (float)(q - 8);
}
#ifndef K_AT
#define K_AT kv_at_f16
#endif
#ifndef V_AT
#define V_AT kv_at_f16
#endif

// One work-group of ATT_WG items per (query, head): global size (ATT_WG, n_head, n).
// Positions are visited in tiles of ATT_WG, flash-attention style: each item scores one position
// of the tile (a full dot product with the head's query, held in local memory); the tile's
// maximum updates the running maximum m, the running sum l and the accumulator are rescaled by
// exp(m_old - m_new), and each item adds the tile's weighted V rows for the dims it owns
// (dims lid, lid + ATT_WG, ...: consecutive items read consecutive values of a V row).
// head_dim <= ATT_WG * ATT_DIMS_PER_ITEM (the host checks).
#define ATT_WG 64
#define ATT_DIMS_PER_ITEM 4

__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1)))
void attention(__global const float* q, __global const uchar* k, __global const uchar* v,
               __global float* out, int n_head, int n_head_kv, int head_dim, int pos0, int window,
               float scale, ulong k_row_bytes, ulong v_row_bytes, __local float* q_local) {
    __local float red[ATT_WG];  // reduction scratch
    __local float p[ATT_WG];    // the tile's softmax numerators
    const int lid = get_local_id(0), h = get_group_id(1), t = get_group_id(2);
    const int hk = h / (n_head / n_head_kv);
    const int head_off = hk * head_dim;  // this KV head's first value in a cache row
    __global const float* qt = q + ((ulong)t * n_head + h) * head_dim;
    for (int d = lid; d < head_dim; d += ATT_WG) q_local[d] = qt[d];
    barrier(CLK_LOCAL_MEM_FENCE);

    const int last = pos0 + t;
    const int first = window > 0 ? max(0, last - window + 1) : 0;
    float m = -INFINITY, l = 0.0f;
    float acc[ATT_DIMS_PER_ITEM];
    for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) acc[i] = 0.0f;

    for (int base = first; base <= last; base += ATT_WG) {
        const int position = base + lid;
        float s = -INFINITY;
        if (position <= last) {
            __global const uchar* kr = k + (ulong)position * k_row_bytes;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += q_local[d] * K_AT(kr, head_off + d);
            s = dot * scale;
        }
        red[lid] = s;
        for (int w = ATT_WG / 2; w > 0; w >>= 1) {
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid < w) red[lid] = max(red[lid], red[lid + w]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const float m_new = max(m, red[0]);  // finite: the tile has at least one position
        const float correction = exp(m - m_new);
        p[lid] = position <= last ? exp(s - m_new) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);

        const int count = min(ATT_WG, last - base + 1);
        float tile_sum = 0.0f;
        for (int j = 0; j < count; ++j) tile_sum += p[j];
        l = l * correction + tile_sum;
        for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) {
            const int d = lid + i * ATT_WG;
            if (d >= head_dim) break;
            float a = acc[i] * correction;
            __global const uchar* vr = v + (ulong)base * v_row_bytes;
            for (int j = 0; j < count; ++j) a += p[j] * V_AT(vr + (ulong)j * v_row_bytes, head_off + d);
            acc[i] = a;
        }
        m = m_new;
        barrier(CLK_LOCAL_MEM_FENCE);  // red and p are rewritten by the next tile
    }
    __global float* ot = out + ((ulong)t * n_head + h) * head_dim;
    for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) {
        const int d = lid + i * ATT_WG;
        if (d < head_dim) ot[d] = acc[i] / l;
    }
}
