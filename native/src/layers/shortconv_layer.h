// LFM2's short-convolution layer (llama.cpp's build_shortconv_block), the decoder layer's
// attention half replaced by a gated causal depthwise convolution over the last l_cache
// positions:
//
//   h = rms_norm(x) * attn_norm                         (LFM2's operator_norm)
//   B, C, u = split(Wconv_in h)                         ([n][3 n_embd], in that order)
//   y[t] = C[t] * sum_k kernel[k] * (B*u)[t - l_cache + 1 + k]     (per channel, k = 0 oldest;
//                                                        before the sequence's first position the
//                                                        state of earlier calls, zeros at 0)
//   x += Wconv_out y
//   then the feed-forward half of every layer (feed_forward_block)
//
// The last l_cache - 1 values of B*u of each channel are the layer's recurrent state: kept per
// sequence beside its KV cache (KvCache::recurrent_state) and carried from one call to the next,
// so a prompt in chunks, decode steps and a batch of several sequences all see the same window.
// Both backends have the convolution (Ops::short_conv); each keeps the state of the layers it
// runs (the host cache; gpu/device_conv_state.h for offloaded layers).
#pragma once
#include <cstdint>

#include "layers/decoder_layer.h"

namespace ei {

// Runs convolution layer `il` over n tokens at positions pos0 .. pos0 + n - 1 on x in place.
// bcx: scratch of [n][3 n_embd]. Every row goes through the convolution (the state must see each
// token); rows before r0 skip what follows it (llama.cpp's inp_out_ids after the block).
template <class Ops>
void shortconv_layer(Ops& ops, const typename Ops::Weights& L, const LayerConfig& c, const LayerShapes& s,
                     const LayerActs<typename Ops::Buf>& a, typename Ops::Buf bcx, int il, int64_t n, int64_t pos0,
                     int64_t r0) {
    const int64_t d = s.n_embd;
    ops.rms_norm(a.x, L.attn_norm, a.h, n, d);
    ops.matmul(L.conv_in, a.h, n, bcx);
    ops.short_conv(il, bcx, n, d, pos0, L.conv_kernel, s.conv_l_cache, a.h);  // y into h (free again)
    ops.matmul(L.conv_out, a.h, n, a.out);
    const int64_t m = n - r0;
    if (m == 0) return;
    const typename Ops::Buf xr = ops.rows(a.x, r0, d);
    ops.add(xr, ops.rows(a.out, r0, d), m * d);
    feed_forward_block(ops, L, c, s, a, xr, m);
}

// Layer il, whichever kind it is: a short convolution where it has conv_in (bcx: its scratch,
// as above), else the attention layer (layers/decoder_layer.h). What both backends' forwards call.
template <class Ops>
void run_layer(Ops& ops, const typename Ops::Weights& L, const LayerConfig& c, const LayerShapes& s,
               const LayerActs<typename Ops::Buf>& a, typename Ops::Buf bcx, int il, int64_t n, int64_t pos0,
               int64_t r0) {
    if (ops.present(L.conv_in)) shortconv_layer(ops, L, c, s, a, bcx, il, n, pos0, r0);
    else decoder_layer(ops, L, c, s, a, il, n, pos0, r0);
}

}  // namespace ei
