// Centered keys: how a quantized K cache stores keys relative to a per-layer mean.
//
// The keys of a head share a large common direction (the same in every position, give or take
// RoPE), which the Hadamard rotation spreads over the head but does not remove, so most of the
// 4 bits of a Q4_0 key are spent on it. Subtracting a mean key mu before quantizing leaves only
// what differs between positions. It is exact for attention: q . k = q . (k - mu) + q . mu, and
// q . mu is one number per query head, added back to the scores (to the maximum of the kernels'
// partial softmax results, which is the same as adding it to each score: centered_attention.h).
//
// A per-channel scale s evens out the channels before the rotation mixes them:
//   stored row:  R ((k - mu) / s)        (R: kv/hadamard.h; / s channel by channel)
//   its query:   R (q * s)               so (R (q * s)) . (R ((k - mu) / s)) = q . (k - mu)
// s = sqrt of each channel's spread around mu (normalized to an RMS of 1 per head): with the
// query's channels of similar size, that minimizes the expected score error of a rounding error
// spread evenly by R (Cauchy-Schwarz on sum q_c^2 s_c^2 * sum r_c^2 / s_c^2).
//
// V is centered alike on its own mean nu (stored: v - nu): the softmax weights p_i of a query sum
// to 1, so sum p_i v_i = sum p_i (v_i - nu) + nu, and the kernels' partial sums get l * nu added.
//
// mu, s and nu must not depend on how the tokens were batched (prefix reuse and chunked prompts
// must give exactly a cold run's tokens), so they come from the first kSinkRows positions only,
// and those positions (the "sink" rows: the first tokens, on which attention heads park most of
// their weight) are kept in F16, K and V, outside the quantized rows. Every later position is
// stored centered. mu, s and nu are fixed when position kSinkRows - 1 is stored and then travel
// with the cache (snapshots, state files); a context shift re-encodes moved rows with the same
// ones (any values are exact: they only decide what the 4 bits are spent on).
#pragma once
#include <cstdint>

namespace ei {

// Positions kept in F16 at the start of a centered cache, whose keys define mu and s. 64, not 32:
// RoPE keeps turning the slower channel pairs of later keys away from the first positions' mean,
// and more sink rows see more of that (and keep more positions exact): both models' q4_0/q4_0
// perplexity is lower with 64, Gemma 3's most (docs/PERFORMANCE.md, "KV cache").
constexpr int64_t kSinkRows = 64;

// From the sink rows [n_sink][width] (F16): out[0 .. width) = the K mean mu, out[width .. 2 width)
// = the K scale s (head by head), out[2 width .. 3 width) = the V mean nu.
void centering_from_sink(const uint16_t* sink_k, const uint16_t* sink_v, int64_t n_sink, int64_t width,
                         int64_t head_dim, float* out);

// out = (k - mean) / scale, channel by channel (width values).
void k_center_row(const float* k, const float* mean, const float* scale, int64_t width, float* out);
// k = x * scale + mean, in place (the inverse, for a context shift).
void k_uncenter_row(float* x, const float* mean, const float* scale, int64_t width);

}  // namespace ei
