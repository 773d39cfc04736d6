// y = W x for one weight type, chosen at build time, in one of two ways:
//  - float weights (F32, F16): -DDEQUANT32=dequant32_<type> (dequant.cl); matvec / matmat
//    multiply the float activations x [n][cols] with the weights, 32-element chunks at a time.
//  - quantized weights: -DVEC_DOT=vec_dot_row_<type> -DACT_BLOCK=block_<vec_dot type>
//    (vec_dot.cl, vec_dot_iquants.cl); matmul_q takes the activations already quantized to the
//    weight type's vec_dot type (quantize_act.cl) and forms each output as the CPU does, integers
//    and float order alike (llama.cpp's GPU backends also multiply quantized activations:
//    CUDA's MMVQ / MMQ), so the device and the CPU agree bit for bit.
// W: [rows][cols] stored as rows of `row_bytes` bytes; y: [n][rows] float. cols is a multiple
// of 32, and of the block size (the host checks).
//
// Work split: one work-group of MM_WG items per weight row. Item i takes the 32-element chunks
// i, i + MM_WG, ... of the row, dequantizes each once into registers and multiplies it with the
// activations; the items' partial sums are added in local memory. matvec serves a decode step
// (n = 1); matmat a prompt chunk, where each work-group also takes a tile of MM_TILE tokens, so
// a weight chunk is dequantized once for MM_TILE dot products.
//
// The *_id kernels serve a mixture of experts (layers/cpu_moe.cpp): W is a stack of expert
// matrices and each activation row (a "slot": one token's choice of expert) names its expert.

#pragma OPENCL FP_CONTRACT OFF  // the CPU rounds every product and sum (vec_dot.cl)

#ifndef MM_WG
#define MM_WG 64
#endif
#define MM_TILE 8

// Sum of v[0 .. MM_WG-1] into v[0]; every item of the group must call it.
inline void reduce_sum(__local float* v, int lid) {
    for (int s = MM_WG / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) v[lid] += v[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

#ifdef DEQUANT32
// row . x over the work-group (every item must call it): item lid takes the chunks lid,
// lid + MM_WG, ...; the partial sums are added in local memory. The sum, for every item.
inline float row_dot(__global const uchar* row, __global const float* x, int cols, __local float* partial, int lid) {
    float chunk[32];
    float acc = 0.0f;
    for (int c = lid; c < cols / 32; c += MM_WG) {
        DEQUANT32(row, c, chunk);
        __global const float* xc = x + 32 * c;
        for (int j = 0; j < 32; ++j) acc += chunk[j] * xc[j];
    }
    partial[lid] = acc;
    reduce_sum(partial, lid);
    return partial[0];
}

__kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1)))
void matvec(__global const uchar* w, ulong row_bytes, __global const float* x, __global float* y,
            int cols) {
    __local float partial[MM_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const float dot = row_dot(w + (ulong)r * row_bytes, x, cols, partial, lid);
    if (lid == 0) y[r] = dot;
}

// Global size (rows * MM_WG, ceil(n / MM_TILE)).
__kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1)))
void matmat(__global const uchar* w, ulong row_bytes, __global const float* x, __global float* y,
            int cols, int rows, int n) {
    __local float partial[MM_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const int t0 = get_group_id(1) * MM_TILE;
    const int tiles = min(MM_TILE, n - t0);
    __global const uchar* row = w + (ulong)r * row_bytes;
    float chunk[32];
    float acc[MM_TILE];
    for (int t = 0; t < MM_TILE; ++t) acc[t] = 0.0f;
    for (int c = lid; c < cols / 32; c += MM_WG) {
        DEQUANT32(row, c, chunk);
        for (int t = 0; t < tiles; ++t) {
            __global const float* xc = x + (ulong)(t0 + t) * cols + 32 * c;
            float a = 0.0f;
            for (int j = 0; j < 32; ++j) a += chunk[j] * xc[j];
            acc[t] += a;
        }
    }
    for (int t = 0; t < tiles; ++t) {
        partial[lid] = acc[t];
        reduce_sum(partial, lid);
        if (lid == 0) y[(ulong)(t0 + t) * rows + r] = partial[0];
    }
}

// A mixture of experts' matmul (matvec's order): y[s][r] = W[ids[s]] row r . x[s / x_per], W a
// stack of expert matrices `expert_bytes` apart. Global size (rows * MM_WG, n_slots).
__kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1)))
void matvec_id(__global const uchar* w, ulong row_bytes, ulong expert_bytes, __global const int* ids,
               __global const float* x, __global float* y, int cols, int rows, int x_per) {
    __local float partial[MM_WG];
    const int r = get_group_id(0), s = get_group_id(1), lid = get_local_id(0);
    __global const uchar* row = w + (ulong)ids[s] * expert_bytes + (ulong)r * row_bytes;
    const float dot = row_dot(row, x + (ulong)(s / x_per) * cols, cols, partial, lid);
    if (lid == 0) y[(ulong)s * rows + r] = dot;
}
#endif  // DEQUANT32

#ifdef VEC_DOT
// One work-item per output y[t][r] (global size (rows, n)): the whole row in the CPU's order
// (vec_dot.cl), so no partial sums are split across items. xq: [n] rows of nb ACT_BLOCKs
// (the activations' blocks line up with the weight row's).
__kernel void matmul_q(__global const uchar* w, ulong row_bytes, __global const ACT_BLOCK* xq, __global float* y,
                       int nb, int rows, int n) {
    const int r = get_global_id(0), t = get_global_id(1);
    y[(ulong)t * rows + r] = VEC_DOT(w + (ulong)r * row_bytes, xq + (ulong)t * nb, nb, t, n, rows);
}

// A mixture of experts' matmul: y[s][r] = W[ids[s]] row r . xq[s / x_per] (slot s of a token's
// n_used = x_per choices, or x_per = 1: one activation row a slot), W a stack of expert matrices
// `expert_bytes` apart. Each output as a one-row matmul forms it (t = 0 of n = 1): the CPU
// multiplies the experts' rows in BatchOrder::per_row (layers/cpu_moe.cpp). Global size
// (rows, n_slots).
__kernel void matmul_q_id(__global const uchar* w, ulong row_bytes, ulong expert_bytes, __global const int* ids,
                          __global const ACT_BLOCK* xq, __global float* y, int nb, int rows, int x_per) {
    const int r = get_global_id(0), s = get_global_id(1);
    __global const uchar* we = w + (ulong)ids[s] * expert_bytes;
    y[(ulong)s * rows + r] = VEC_DOT(we + (ulong)r * row_bytes, xq + (ulong)(s / x_per) * nb, nb, 0, 1, rows);
}
#endif  // VEC_DOT
