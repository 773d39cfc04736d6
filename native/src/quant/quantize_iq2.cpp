// Quantizers of IQ2_XXS, IQ2_XS and IQ2_S (ggml's quantize_iq2_xxs / quantize_iq2_xs /
// quantize_iq2_s). IQ2_XXS and IQ2_XS need an importance matrix (ggml asserts one); IQ2_S weighs
// by 0.25 sigma2 + x^2 without one.
//
// Every group of 8 elements is stored as magnitudes from a grid of 8-element lattice points (each
// coordinate 1, 3 or 5 times the sub-block scale: levels 0..2) and signs. IQ2_XXS and IQ2_XS keep
// 7 sign bits and an even number of negatives, so a group with an odd count flips the sign of its
// least important element (smallest w x^2) first; IQ2_S keeps all 8.
//
// Per sub-block (32 elements for IQ2_XXS, 16 for the others) the scale is searched over trial
// inverse scales id = (5 + 0.1 is) / max: each element takes the nearest level, a group whose
// levels are not a grid point takes its best neighbour (quant/iq_grid_search.h) by weighted
// squared error with sqrt(w), and the trial maximising (sum w x q)^2 / (sum w q^2) wins. Groups
// then snap once more at the winning scale (IQ2_XXS all of them, the others those that were off
// the grid), the least-squares scale is refitted, and the sub-block scales are quantized to 4 bits
// against d = max_scale / 31.
//
// Every float operation is written in ggml's order, unfused (this unit is built for the baseline
// target), because the chosen levels depend on exact comparisons.
#include <cfloat>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/iq_grid_search.h"
#include "quant/quantize.h"
#include "quant/quantize_math.h"

namespace ei {
namespace qref {

namespace {

constexpr float kIq2sGroupMaxEps = 1e-8f;  // IQ2_S's all-zero threshold (ggml's GROUP_MAX_EPS_IQ2_S)

// The grid point nearest to xval (8 magnitudes) at `scale` among the neighbours of an off-grid
// key, by squared error weighted with waux; writes its levels to L and returns its index
// (ggml's iq2_find_best_neighbour). The first of equals wins.
int best_neighbour(const IqGridSearch& grid, const uint16_t* neighbours, const float* xval, const float* waux,
                   float scale, int8_t* L) {
    float best_d2 = FLT_MAX;
    int best = neighbours[1];  // ggml aborts if no distance is below FLT_MAX (overflow); keep the first
    for (int j = 1; j <= neighbours[0]; ++j) {
        const int8_t* p = grid.levels(neighbours[j]);
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float q = 2 * p[i] + 1;
            const float diff = scale * q - xval[i];
            d2 += waux[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = neighbours[j];
        }
    }
    std::memcpy(L, grid.levels(best), 8);
    return best;
}

// Levels of one group at inverse scale id, snapped to the grid (an off-grid key takes its best
// neighbour at `scale`). Returns whether the nearest levels were a grid point already.
bool snap_group(const IqGridSearch& grid, const float* xval, const float* waux, float id, float scale, int8_t* L) {
    for (int i = 0; i < 8; ++i) L[i] = (int8_t)clamp(nearest_int(0.5f * (id * xval[i] - 1)), 0, 2);
    const int u = IqGridSearch::key(L);
    if (grid.index(u) >= 0) return true;
    best_neighbour(grid, grid.neighbours(u), xval, waux, scale, L);
    return false;
}

// sum w x q and sum w q^2 over n elements, q = 2 L + 1.
void level_sums(int n, const float* weight, const float* xval, const int8_t* L, float* sumqx, float* sumq2) {
    *sumqx = 0;
    *sumq2 = 0;
    for (int i = 0; i < n; ++i) {
        const float w = weight[i];
        const float q = 2 * L[i] + 1;
        *sumqx += w * xval[i] * q;
        *sumq2 += w * q * q;
    }
}

// Magnitudes of n_groups groups of 8 into xval, with 7-bit signs: an odd count of negatives flips
// the least important element of the group back (it will be decoded with the wrong sign).
void magnitudes_even_signs(int n_groups, const float* xb, const float* weight, float* xval, uint8_t* signs) {
    for (int k = 0; k < n_groups; ++k) {
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; ++i) {
            if (xb[8 * k + i] >= 0) {
                xval[8 * k + i] = xb[8 * k + i];
            } else {
                xval[8 * k + i] = -xb[8 * k + i];
                ++nflip;
                s |= (uint8_t)(1 << i);
            }
        }
        if (nflip % 2) {
            int imin = 0;
            float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
            for (int i = 1; i < 8; ++i) {
                const float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if (ax < min) {
                    min = ax;
                    imin = i;
                }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = s & 127;
    }
}

float max_of(int n, const float* v) {
    float m = v[0];
    for (int i = 1; i < n; ++i) m = m > v[i] ? m : v[i];
    return m;
}

// The 4-bit code of a sub-block scale against the super-block's d = max_scale / 31.
int scale_code(float id, float scale) { return clamp(nearest_int(0.5f * (id * scale - 1)), 0, 15); }

// The 16 sub-block scales' codes, two to a byte (IQ2_XS, IQ2_S).
void pack_scale_codes(float id, const float* scales, uint8_t* out) {
    for (int ib = 0; ib < QK_K / 16; ++ib) {
        const int l = scale_code(id, scales[ib]);
        if (ib % 2 == 0) out[ib / 2] = (uint8_t)l;
        else out[ib / 2] |= (uint8_t)(l << 4);
    }
}

// One IQ2_XXS super-block.
void quantize_iq2_xxs_block(const IqGridSearch& grid, const float* xbl, const float* qwbl, block_iq2_xxs* y) {
    constexpr int kSub = 32;
    float scales[QK_K / kSub];
    float weight[kSub], waux[kSub], xval[kSub];
    int8_t L[kSub], Laux[kSub];
    uint8_t block_signs[kSub / 8];
    uint32_t q2[2 * (QK_K / kSub)] = {};  // per sub-block: 4 grid indices, then 4 x 7 signs and the scale

    y->d = fp32_to_fp16(0.f);
    float max_scale = 0;
    const float sigma2 = sum_of_squares(xbl, QK_K) / QK_K;

    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        importance_weights(kSub, xb, qwbl + kSub * ib, sigma2, weight);
        for (int i = 0; i < kSub; ++i) waux[i] = std::sqrt(weight[i]);
        magnitudes_even_signs(kSub / 8, xb, weight, xval, block_signs);
        if (max_of(kSub, xval) < kGroupMaxEps) {
            scales[ib] = 0;
            continue;
        }
        float scale = make_qp_quants(kSub, 4, xval, (uint8_t*)L, weight);
        const float eff_max = scale * 3;
        if (eff_max <= 0) {
            scales[ib] = 0;
            continue;
        }
        float best = 0;
        for (int is = -6; is <= 6; ++is) {
            const float id = (5 + is * 0.1f) / eff_max;
            const float this_scale = 1 / id;
            for (int k = 0; k < kSub / 8; ++k)
                snap_group(grid, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k);
            float sumqx, sumq2;
            level_sums(kSub, weight, xval, Laux, &sumqx, &sumq2);
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                std::memcpy(L, Laux, kSub);
            }
        }
        if (scale > 0) {
            const float id = 1 / scale;
            for (int k = 0; k < kSub / 8; ++k) snap_group(grid, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k);
            float sumqx, sumq2;
            level_sums(kSub, weight, xval, L, &sumqx, &sumq2);
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) {  // ggml guards against it: the scale is stored unsigned, so flip the signs
            scale = -scale;
            for (int k = 0; k < kSub / 8; ++k) block_signs[k] = (uint8_t)(~block_signs[k] & 127);
        }
        for (int k = 0; k < kSub / 8; ++k) {
            q2[2 * ib + 0] |= (uint32_t)grid.index(IqGridSearch::key(L + 8 * k)) << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)block_signs[k] << 7 * k;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }

    if (!max_scale) {
        std::memset(y->qs, 0, sizeof y->qs);
        return;
    }
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kSub; ++ib) q2[2 * ib + 1] |= (uint32_t)scale_code(id, scales[ib]) << 28;
    std::memcpy(y->qs, q2, sizeof y->qs);
}

// The sub-block search IQ2_XS and IQ2_S share (16 elements, 19 trials from max / 5, then a second
// snap of the groups that were off the grid), max the largest magnitude. Writes the levels to L
// and returns the scale.
float search_sub_block_16(const IqGridSearch& grid, const float* xval, float max, const float* weight,
                          const float* waux, int8_t* L) {
    constexpr int kSub = 16;
    int8_t Laux[kSub];
    bool on_grid[2] = {true, true}, on_grid_aux[2];
    std::memset(L, 0, kSub);
    float best = 0;
    float scale = max / 5;
    for (int is = -9; is <= 9; ++is) {
        const float id = (5 + is * 0.1f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < 2; ++k)
            on_grid_aux[k] = snap_group(grid, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k);
        float sumqx, sumq2;
        level_sums(kSub, weight, xval, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, Laux, kSub);
            on_grid[0] = on_grid_aux[0];
            on_grid[1] = on_grid_aux[1];
        }
    }
    if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 2; ++k)
            if (!on_grid[k]) snap_group(grid, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k);
        float sumqx, sumq2;
        level_sums(kSub, weight, xval, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

// One IQ2_XS super-block.
void quantize_iq2_xs_block(const IqGridSearch& grid, const float* xbl, const float* qwbl, block_iq2_xs* y) {
    constexpr int kSub = 16;
    float scales[QK_K / kSub];
    float weight[kSub], waux[kSub], xval[kSub];
    int8_t L[kSub];
    uint8_t block_signs[2];
    uint16_t q2[QK_K / 8] = {};  // per group: 9-bit grid index | 7 signs << 9

    y->d = fp32_to_fp16(0.f);
    std::memset(y->scales, 0, sizeof y->scales);
    float max_scale = 0;
    const float sigma2 = sum_of_squares(xbl, QK_K) / QK_K;

    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        importance_weights(kSub, xb, qwbl + kSub * ib, sigma2, weight);
        for (int i = 0; i < kSub; ++i) waux[i] = std::sqrt(weight[i]);
        magnitudes_even_signs(2, xb, weight, xval, block_signs);
        const float max = max_of(kSub, xval);
        if (max < kGroupMaxEps) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_sub_block_16(grid, xval, max, weight, waux, L);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; ++k) block_signs[k] = (uint8_t)(~block_signs[k] & 127);
        }
        for (int k = 0; k < 2; ++k)
            q2[2 * ib + k] = (uint16_t)(grid.index(IqGridSearch::key(L + 8 * k)) | block_signs[k] << 9);
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }

    if (!max_scale) {
        std::memset(y->qs, 0, sizeof y->qs);
        return;
    }
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d);
    const float id = 1 / d;
    pack_scale_codes(id, scales, y->scales);
    std::memcpy(y->qs, q2, sizeof y->qs);
}

// One IQ2_S super-block; qwbl may be null.
void quantize_iq2_s_block(const IqGridSearch& grid, const float* xbl, const float* qwbl, block_iq2_s* y) {
    constexpr int kSub = 16;
    float scales[QK_K / kSub];
    float weight[kSub], waux[kSub], xval[kSub];
    int8_t L[kSub];

    std::memset(y, 0, sizeof *y);
    y->d = fp32_to_fp16(0.f);
    float max_scale = 0;
    const float sigma2 = 2 * sum_of_squares(xbl, QK_K) / QK_K;

    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        if (qwbl) {
            importance_weights(kSub, xb, qwbl + kSub * ib, sigma2, weight);
        } else {
            for (int i = 0; i < kSub; ++i) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
        }
        for (int i = 0; i < kSub; ++i) waux[i] = std::sqrt(weight[i]);
        uint8_t block_signs[2] = {0, 0};
        for (int i = 0; i < kSub; ++i) {
            xval[i] = xb[i] >= 0 ? xb[i] : -xb[i];
            if (!(xb[i] >= 0)) block_signs[i / 8] |= (uint8_t)(1 << i % 8);
        }
        const float max = max_of(kSub, xval);
        if (max < kIq2sGroupMaxEps) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_sub_block_16(grid, xval, max, weight, waux, L);
        if (scale < 0) {
            scale = -scale;
            block_signs[0] = (uint8_t)~block_signs[0];
            block_signs[1] = (uint8_t)~block_signs[1];
        }
        for (int k = 0; k < 2; ++k) {
            const int g = grid.index(IqGridSearch::key(L + 8 * k));
            const int i8 = 2 * ib + k;
            y->qs[i8] = (uint8_t)(g & 255);
            y->qh[i8 / 4] |= (uint8_t)((g >> 8) << 2 * (i8 % 4));
            y->qs[QK_K / 8 + i8] = block_signs[k];
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }

    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d * 0.9875f);
    const float id = 1 / d;
    pack_scale_codes(id, scales, y->scales);
}

}  // namespace

void quantize_row_iq2_xxs_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    const IqGridSearch& grid = iq2xxs_grid_search();
    block_iq2_xxs* y = (block_iq2_xxs*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i) quantize_iq2_xxs_block(grid, x + i * QK_K, imatrix + i * QK_K, &y[i]);
}

void quantize_row_iq2_xs_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    const IqGridSearch& grid = iq2xs_grid_search();
    block_iq2_xs* y = (block_iq2_xs*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i) quantize_iq2_xs_block(grid, x + i * QK_K, imatrix + i * QK_K, &y[i]);
}

void quantize_row_iq2_s_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    const IqGridSearch& grid = iq2s_grid_search();
    block_iq2_s* y = (block_iq2_s*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i)
        quantize_iq2_s_block(grid, x + i * QK_K, imatrix ? imatrix + i * QK_K : nullptr, &y[i]);
}

void quantize_row_iq2_s(const float* x, void* vy, int64_t n) { quantize_row_iq2_s_imatrix(x, vy, n, nullptr); }

}  // namespace qref
}  // namespace ei
