// y = W x for one weight type, chosen at build time: -DDEQUANT32=dequant32_<type> (dequant.cl).
// W: [rows][cols] stored as rows of `row_bytes` bytes; x: [n][cols] float; y: [n][rows] float.
// cols is a multiple of 32 (the host checks).
//
// Work split: one work-group of MM_WG items per weight row. Item i takes the 32-element chunks
// i, i + MM_WG, ... of the row, dequantizes each once into registers and multiplies it with the
// activations; the items' partial sums are added in local memory. matvec serves a decode step
// (n = 1); matmat a prompt chunk, where each work-group also takes a tile of MM_TILE tokens, so
// a weight chunk is dequantized once for MM_TILE dot products.

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

__kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1)))
void matvec(__global const uchar* w, ulong row_bytes, __global const float* x, __global float* y,
            int cols) {
    __local float partial[MM_WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    __global const uchar* row = w + (ulong)r * row_bytes;
    float chunk[32];
    float acc = 0.0f;
    for (int c = lid; c < cols / 32; c += MM_WG) {
        DEQUANT32(row, c, chunk);
        __global const float* xc = x + 32 * c;
        for (int j = 0; j < 32; ++j) acc += chunk[j] * xc[j];
    }
    partial[lid] = acc;
    reduce_sum(partial, lid);
    if (lid == 0) y[r] = partial[0];
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
