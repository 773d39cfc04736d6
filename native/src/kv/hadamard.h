// The rotation applied to K head vectors before they are quantized into the cache.
//
// Keys have a few outlier channels (dimensions whose values are many times the others), so one
// Q4_0 scale per 32 values spends its 16 levels on the outlier and rounds the rest to almost
// nothing. An orthogonal rotation spreads every channel over all of them: with
//
//   R x = H D x / sqrt(d)       H: the d x d Walsh-Hadamard matrix (entries +-1, H H = d I),
//                               D: a fixed diagonal of +-1 signs, d = head_dim (a power of two)
//
// the rotated values of a head look close to Gaussian and quantize with a much smaller error.
// Scores are unchanged because Q is rotated by the same R before the dot products:
// (R q) . (R k) = q^T D H H D k / d = q . k. V is not rotated.
//
// R costs d log2(d) additions per head vector (the fast transform), nothing next to a matmul.
// The signs are part of the cache format (a state file of a rotated cache says so in its
// header): they must never change.
#pragma once
#include <cstdint>

namespace ei {

// True if a head of head_dim values can be rotated (a power of two, at least 2).
bool hadamard_supported(int64_t head_dim);

// x: [n_vec][head_dim] floats, rotated in place: x <- R x for each head vector.
void hadamard_rotate(float* x, int64_t n_vec, int64_t head_dim);
// The inverse: x <- R^T x = D H x / sqrt(d).
void hadamard_unrotate(float* x, int64_t n_vec, int64_t head_dim);

}  // namespace ei
