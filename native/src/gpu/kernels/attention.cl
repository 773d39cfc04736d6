// Causal attention over a KV cache kept on the device in F16.
//   cache K, V: [n_ctx][n_head_kv][head_dim] halves (stored as ushort bit patterns)
//   q, out:     [n][n_head][head_dim] floats; query t sits at position pos0 + t
// Query head h reads KV head h / (n_head / n_head_kv) (grouped-query attention). window > 0
// limits each query to its last `window` positions (sliding-window layers).

// Rows of n float values into the cache at positions pos0 .. pos0 + n - 1 (width values each),
// rounded to nearest even as the CPU's F16 cache stores them. Global size (width, n).
__kernel void kv_store_f16(__global const float* src, __global half* cache, int pos0, int width) {
    const int i = get_global_id(0), t = get_global_id(1);
    vstore_half_rte(src[(ulong)t * width + i], (ulong)(pos0 + t) * width + i, cache);
}

// One work-group of ATT_WG items per (query, head): global size (ATT_WG, n_head, n).
// Positions are visited in tiles of ATT_WG, flash-attention style: each item scores one position
// of the tile (a full dot product with the head's query, held in local memory); the tile's
// maximum updates the running maximum m, the running sum l and the accumulator are rescaled by
// exp(m_old - m_new), and each item adds the tile's weighted V rows for the dims it owns
// (dims lid, lid + ATT_WG, ...: consecutive items read consecutive halves of a V row).
// head_dim <= ATT_WG * ATT_DIMS_PER_ITEM (the host checks).
#define ATT_WG 64
#define ATT_DIMS_PER_ITEM 4

__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1)))
void attention_f16(__global const float* q, __global const half* k, __global const half* v,
                   __global float* out, int n_head, int n_head_kv, int head_dim, int pos0, int window,
                   float scale, __local float* q_local) {
    __local float red[ATT_WG];  // reduction scratch
    __local float p[ATT_WG];    // the tile's softmax numerators
    const int lid = get_local_id(0), h = get_group_id(1), t = get_group_id(2);
    const int hk = h / (n_head / n_head_kv);
    const ulong stride = (ulong)n_head_kv * head_dim;  // halves per cached position
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
            __global const half* kr = k + (ulong)position * stride + (ulong)hk * head_dim;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += q_local[d] * vload_half(d, kr);
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
            __global const half* vd = v + (ulong)base * stride + (ulong)hk * head_dim + d;
            for (int j = 0; j < count; ++j) a += p[j] * vload_half(0, vd + (ulong)j * stride);
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
