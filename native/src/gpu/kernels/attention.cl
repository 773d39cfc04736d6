// Causal attention over a KV cache kept on the device in F16, Q8_0 or Q4_0.
//   cache K, V: [n_ctx] rows of n_head_kv * head_dim values of their type (k_row_bytes each);
//               F16 rows are halves, quantized rows blocks of 32 (kv_quant.cl stores them)
//   q, out:     [n][n_head][head_dim] floats from q[q0] and out[0]; query t sits at position pos0 + t
// The types are chosen at build time: -DK_AT=kv_at_<type> -DV_AT=kv_at_<type> (default F16).
// Query head h reads KV head h / (n_head / n_head_kv) (grouped-query attention). window > 0
// limits each query to its last `window` positions (sliding-window layers). With has_sinks, each
// head's attention-sink logit sinks[h] joins its softmax's denominator (gpt-oss; the CPU's step,
// cpu/attn_sink.h: once per query, after the positions, before the division by the sum).
#pragma OPENCL FP_CONTRACT OFF  // attention_f16 spells out the CPU's fmas

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

// With -DCENTERED (a centered K, kv/centered_k.h): positions below n_sink are read from the F16
// sink rows sink_k / sink_v ([n_sink][n_head_kv * head_dim]) and scored with the query as roped,
// q_sink; the later ones hold R((k - mu) / s) and v - nu, so they are scored with q = R(q * s)
// plus bias (scale * (q . mu), per query row and head) and nu is added to their V values
// (kv_centered.cl makes q and bias). The sum is the CPU's (kv/centered_attention.h), which adds
// the same terms to its partial results rather than to each position.
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1)))
void attention(__global const float* q, ulong q0, __global const uchar* k, __global const uchar* v,
               __global float* out, int n_head, int n_head_kv, int head_dim, int pos0, int window,
               float scale, ulong k_row_bytes, ulong v_row_bytes, __global const float* sinks, int has_sinks,
               __local float* q_local
#ifdef CENTERED
               , __global const float* q_sink, ulong q_sink0, __global const float* bias, __global const half* sink_k,
               __global const half* sink_v, __global const float* centering, int n_sink, __local float* q_sink_local
#endif
               ) {
    __local float red[ATT_WG];  // reduction scratch
    __local float p[ATT_WG];    // the tile's softmax numerators
    const int lid = get_local_id(0), h = get_group_id(1), t = get_group_id(2);
    const int hk = h / (n_head / n_head_kv);
    const int head_off = hk * head_dim;  // this KV head's first value in a cache row
    __global const float* qt = q + q0 + ((ulong)t * n_head + h) * head_dim;
    for (int d = lid; d < head_dim; d += ATT_WG) q_local[d] = qt[d];
#ifdef CENTERED
    const int width = n_head_kv * head_dim;  // values per sink row
    const float row_bias = bias[(ulong)t * n_head + h];
    __global const float* nu = centering + 2 * width + head_off;
    __global const float* qst = q_sink + q_sink0 + ((ulong)t * n_head + h) * head_dim;
    for (int d = lid; d < head_dim; d += ATT_WG) q_sink_local[d] = qst[d];
#else
    const int n_sink = 0;
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

    const int last = pos0 + t;
    const int first = window > 0 ? max(0, last - window + 1) : 0;
    float m = -INFINITY, l = 0.0f;
    float acc[ATT_DIMS_PER_ITEM];
    for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) acc[i] = 0.0f;

    for (int base = first; base <= last; base += ATT_WG) {
        const int position = base + lid;
        float s = -INFINITY;
        if (position <= last && position >= n_sink) {
            __global const uchar* kr = k + (ulong)position * k_row_bytes;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += q_local[d] * K_AT(kr, head_off + d);
            s = dot * scale;
#ifdef CENTERED
            s += row_bias;
        } else if (position <= last) {
            __global const half* kr = sink_k + (ulong)position * width + head_off;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; ++d) dot += q_sink_local[d] * vload_half(d, kr);
            s = dot * scale;
#endif
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
#ifdef CENTERED
            const int n_sink_tile = clamp(n_sink - base, 0, count);  // the tile's sink positions come first
            for (int j = 0; j < n_sink_tile; ++j) a += p[j] * vload_half(head_off + d, sink_v + (ulong)(base + j) * width);
            for (int j = n_sink_tile; j < count; ++j) a += p[j] * (V_AT(vr + (ulong)j * v_row_bytes, head_off + d) + nu[d]);
#else
            for (int j = 0; j < count; ++j) a += p[j] * V_AT(vr + (ulong)j * v_row_bytes, head_off + d);
#endif
            acc[i] = a;
        }
        m = m_new;
        barrier(CLK_LOCAL_MEM_FENCE);  // red and p are rewritten by the next tile
    }
    // The sink as the CPU's quantized-cache paths add it: acc * ms / l, S * ms + vs unfused.
    float ms = 1.0f;
    if (has_sinks) {
        const float sink = sinks[h];
        float vs = 1.0f;
        if (sink > m) ms = exp(m - sink);
        else vs = exp(sink - m);
        l = l * ms + vs;
    }
    __global float* ot = out + ((ulong)t * n_head + h) * head_dim;
    for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) {
        const int d = lid + i * ATT_WG;
        if (d < head_dim) ot[d] = acc[i] * ms / l;
    }
}

// ---- F16 K and V: the CPU's one-row kernel, operation for operation ---------------------------
// With an F16 cache the CPU runs ggml's one-row flash attention (cpu/attn_online.h, AVX2 /
// AVX-512 primitives in cpu/x86/ops_avx2.cpp): Q rounded to F16; each score a dot product of F16
// values in 4 x 8 FMA lanes reduced in a fixed order, times scale; then, position after position,
// an online softmax whose V accumulator is F16 (rounded after every update):
//   s > M:  ms = exp(M - s), M = s, acc = f16(acc * ms), vs = 1;   else  ms = 1, vs = exp(s - M)
//   acc = f16(fma(v, vs, acc));   S = fma(S, ms, vs);   out = f32(acc) * (1 / S)
// With a sink, one more step of the recurrence on M and S before the division, its ms scaling
// the F32 output rather than the F16 accumulator: out = f32(acc) * ms * (1 / S) (attn_online.h).
// Here the scores of a tile of ATT_WG positions are computed in parallel (one per item), then
// every item runs the recurrence over the tile in position order (each the same M and S) for the
// dims it owns.

// exp as the CPU's libm gives it: glibc's expf is correctly rounded but in rare near-halfway
// cases, and so is exp in double rounded to float; OpenCL's float exp may be a few ulp off.
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
inline float exp_libm(float x) { return (float)exp((double)x); }
#else
inline float exp_libm(float x) { return exp(x); }
#endif

inline float round_half(float x) {
    ushort h;
    vstore_half_rte(x, 0, (__private half*)&h);
    return vload_half(0, (__private const half*)&h);
}

// ggml_vec_dot_f16 with 256-bit vectors: sum[j][l] += k[i + 8j + l] * q[i + 8j + l] (FMA) over
// steps of 32; (sum0 + sum2) + (sum1 + sum3); then lanes l + (l + 4), and two horizontal adds.
// A tail (head_dim % 32) is then summed as the CPU sums it: float products added in double
// (ggml_float), where the device has doubles.
inline float dot_f16_ggml(__global const half* k, __local const float* q, int n) {
    float sum[4][8];
    for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 8; ++l) sum[j][l] = 0.0f;
    const int np = n & ~31;
    for (int i = 0; i < np; i += 32)
        for (int j = 0; j < 4; ++j)
            for (int l = 0; l < 8; ++l) sum[j][l] = fma(vload_half(i + 8 * j + l, k), q[i + 8 * j + l], sum[j][l]);
    float s8[8];
    for (int l = 0; l < 8; ++l) s8[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    float t0[4];
    for (int l = 0; l < 4; ++l) t0[l] = s8[l] + s8[l + 4];
    float r = (t0[0] + t0[1]) + (t0[2] + t0[3]);
#ifdef cl_khr_fp64
    double rd = (double)r;
    for (int i = np; i < n; ++i) rd += (double)(vload_half(i, k) * q[i]);
    return (float)rd;
#else
    for (int i = np; i < n; ++i) r += vload_half(i, k) * q[i];
    return r;
#endif
}

__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1)))
void attention_f16(__global const float* q, ulong q0, __global const half* k, __global const half* v,
                   __global float* out,
                   int n_head, int n_head_kv, int head_dim, int pos0, int window, float scale,
                   __global const float* sinks, int has_sinks, __local float* q_local) {
    __local float scores[ATT_WG];
    const int lid = get_local_id(0), h = get_group_id(1), t = get_group_id(2);
    const int row = n_head_kv * head_dim;  // halves per cached position
    const int head_off = (h / (n_head / n_head_kv)) * head_dim;
    __global const float* qt = q + q0 + ((ulong)t * n_head + h) * head_dim;
    for (int d = lid; d < head_dim; d += ATT_WG) q_local[d] = round_half(qt[d]);
    barrier(CLK_LOCAL_MEM_FENCE);

    const int last = pos0 + t;
    const int first = window > 0 ? max(0, last - window + 1) : 0;
    float M = -INFINITY, S = 0.0f;
    float acc[ATT_DIMS_PER_ITEM];  // F16 values, held as floats
    for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) acc[i] = 0.0f;
    for (int base = first; base <= last; base += ATT_WG) {
        const int position = base + lid;
        if (position <= last)
            scores[lid] = dot_f16_ggml(k + (ulong)position * row + head_off, q_local, head_dim) * scale;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int count = min(ATT_WG, last - base + 1);
        for (int j = 0; j < count; ++j) {
            const float s = scores[j];
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                const float m_old = M;
                M = s;
                ms = exp_libm(m_old - M);
                for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) acc[i] = round_half(acc[i] * ms);
            } else {
                vs = exp_libm(s - M);
            }
            __global const half* vr = v + (ulong)(base + j) * row + head_off;
            for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) {
                const int d = lid + i * ATT_WG;
                if (d < head_dim) acc[i] = round_half(fma(vload_half(d, vr), vs, acc[i]));
            }
            S = fma(S, ms, vs);
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // scores are rewritten by the next tile
    }
    float ms = 1.0f;  // acc * 1 is acc: without a sink the product below is the CPU's acc * inv
    if (has_sinks) {
        const float sink = sinks[h];
        float vs = 1.0f;
        if (sink > M) ms = exp_libm(M - sink);
        else vs = exp_libm(sink - M);
        S = fma(S, ms, vs);
    }
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    __global float* ot = out + ((ulong)t * n_head + h) * head_dim;
    for (int i = 0; i < ATT_DIMS_PER_ITEM; ++i) {
        const int d = lid + i * ATT_WG;
        if (d < head_dim) ot[d] = acc[i] * ms * inv;
    }
}
