// Quantizers of IQ1_S and IQ1_M (ggml's quantize_iq1_s / quantize_iq1_m). IQ1_S needs an
// importance matrix (ggml asserts one); IQ1_M weighs by x^2 without one.
//
// Each element becomes -1, 0 or 1 plus a shared shift of +-1/8 (kIq1Delta), times the
// sub-block's scale (32 elements for IQ1_S, 16 for IQ1_M, whose two halves may take different
// shifts). With three values the weighted least-squares fit can be searched exhaustively: sort the
// sub-block by value, and every pair of split points (i1, i2) of the sorted order assigns -1 below
// i1, 0 up to i2 and 1 above; prefix sums of w x and w give each split's (sum w x q)^2 / sum w q^2
// in constant time. Groups of 8 whose levels are not a point of the IQ1 grid take the nearest
// grid neighbour (quant/iq_grid_search.h) at the fitted scale, and the scale is refitted. The
// sub-block scales are then quantized to 3 bits against d = max_scale / 15; ggml multiplies the
// stored d by 1.125 (IQ1_S) or refits it and multiplies by 1.1125 (IQ1_M), fudge factors its
// author found to lower the error, kept here for the bytes.
//
// Ties in the sort keep the elements' order (glibc's qsort, which ggml calls, is a merge sort
// for arrays this small). Every float operation is written in ggml's order, unfused (this unit
// is built for the baseline target), because the chosen levels depend on exact comparisons.
#include <algorithm>
#include <cfloat>
#include <cstring>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/iq1_grids.h"
#include "quant/iq_grid_search.h"
#include "quant/quantize.h"
#include "quant/quantize_math.h"

namespace ei {
namespace qref {

namespace {

constexpr float kIq1sGroupMaxEps = 1e-12f;  // ggml's GROUP_MAX_EPS_IQ1_S
constexpr float kIq1mGroupMaxEps = 1e-7f;   // ggml's GROUP_MAX_EPS_IQ1_M

// The three values of a level with the shift +1/8 (kPlus) or -1/8 (kMinus).
constexpr float kPlus[3] = {-1 + kIq1Delta, kIq1Delta, 1 + kIq1Delta};
constexpr float kMinus[3] = {-1 - kIq1Delta, -kIq1Delta, 1 - kIq1Delta};

struct Sorted {
    float x;
    int i;
};

// The sub-block's elements in ascending order, ties in index order.
void sort_sub_block(int n, const float* xb, Sorted* order) {
    for (int j = 0; j < n; ++j) order[j] = {xb[j], j};
    std::stable_sort(order, order + n, [](const Sorted& a, const Sorted& b) { return a.x < b.x; });
}

// Levels from the best split: 0 below i1, 1 up to i2, 2 from there (in sorted order).
void split_levels(int n, const Sorted* order, int i1, int i2, int8_t* L) {
    for (int j = 0; j < n; ++j) L[order[j].i] = (int8_t)(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// The grid point nearest to xval (8 elements) at `scale` with level values xg, among the
// neighbours of an off-grid key, by weighted squared error (ggml's iq1_find_best_neighbour2);
// writes its levels to L and returns its index. The first of equals wins.
int best_neighbour(const IqGridSearch& grid, const uint16_t* neighbours, const float* xval, const float* weight,
                   float scale, const float* xg, int8_t* L) {
    auto distance = [&](int g) {
        const int8_t* p = grid.levels(g);
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float diff = scale * xg[p[i]] - xval[i];
            d2 += weight[i] * diff * diff;
        }
        return d2;
    };
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= neighbours[0]; ++j) {
        const float d2 = distance(neighbours[j]);
        if (d2 < best_d2) {
            best_d2 = d2;
            best = neighbours[j];
        }
    }
    // Only an overflowing distance leaves no neighbour: ggml then scans the whole grid (reading
    // xval past the group, a slip) and aborts if that finds nothing either; scan it with the
    // group's own elements, and keep the first neighbour as the last resort.
    for (int g = 0; best < 0 && g < grid.grid_size(); ++g) {
        const float d2 = distance(g);
        if (d2 < best_d2) {
            best_d2 = d2;
            best = g;
        }
    }
    if (best < 0) best = neighbours[1];
    std::memcpy(L, grid.levels(best), 8);
    return best;
}

// Snaps the levels of each group of 8 to the grid (xg[k]: group k's level values); returns
// whether all were on it, and the grid indices in index[].
bool snap_groups(const IqGridSearch& grid, int n_groups, const float* xb, const float* weight, float scale,
                 const float* const* xg, int8_t* L, uint16_t* index) {
    bool all_on_grid = true;
    for (int k = 0; k < n_groups; ++k) {
        const int u = IqGridSearch::key(L + 8 * k);
        int g = grid.index(u);
        if (g < 0) {
            all_on_grid = false;
            g = best_neighbour(grid, grid.neighbours(u), xb + 8 * k, weight + 8 * k, scale, xg[k], L + 8 * k);
        }
        index[k] = (uint16_t)g;
    }
    return all_on_grid;
}

// The least-squares scale of the snapped groups, if it is positive; else `scale`.
float refit_scale(const IqGridSearch& grid, int n_groups, const float* xb, const float* weight,
                  const float* const* xg, const uint16_t* index, float scale) {
    float sumqx = 0, sumq2 = 0;
    for (int k = 0; k < n_groups; ++k) {
        const int8_t* p = grid.levels(index[k]);
        for (int j = 0; j < 8; ++j) {
            const float w = weight[8 * k + j];
            const float q = xg[k][p[j]];
            sumqx += w * q * xb[8 * k + j];
            sumq2 += w * q * q;
        }
    }
    return sumqx > 0 && sumq2 > 0 ? sumqx / sumq2 : scale;
}

int scale_code(float id, float scale) { return clamp(nearest_int(0.5f * (id * scale - 1)), 0, 7); }

// One IQ1_S super-block.
void quantize_iq1_s_block(const IqGridSearch& grid, const float* xbl, const float* qwbl, block_iq1_s* y) {
    constexpr int kSub = 32;
    float scales[QK_K / kSub];
    int8_t shifts[QK_K / kSub];
    float weight[kSub], sumx[kSub + 1], sumw[kSub + 1];
    Sorted order[kSub];
    int8_t L[kSub];
    uint16_t index[kSub / 8];

    y->d = fp32_to_fp16(0.f);
    std::memset(y->qs, 0, sizeof y->qs);
    std::memset(y->qh, 0, sizeof y->qh);
    float max_scale = 0;
    const float sigma2 = 2 * sum_of_squares(xbl, QK_K) / QK_K;

    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        importance_weights(kSub, xb, qwbl + kSub * ib, sigma2, weight);
        float max = std::fabs(xb[0]);
        for (int i = 1; i < kSub; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
        scales[ib] = 0;
        shifts[ib] = 1;
        if (max < kIq1sGroupMaxEps) continue;

        sort_sub_block(kSub, xb, order);
        sumx[0] = sumw[0] = 0;
        for (int j = 0; j < kSub; ++j) {
            const int i = order[j].i;
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_shift = 0;
        for (int i1 = 0; i1 <= kSub; ++i1) {
            for (int i2 = i1; i2 <= kSub; ++i2) {
                for (const float* v : {kPlus, kMinus}) {
                    const float sumqx =
                        (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[kSub] - sumx[i2]) * v[2];
                    const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                                        (sumw[kSub] - sumw[i2]) * v[2] * v[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1;
                        besti2 = i2;
                        best_shift = v == kPlus ? 1 : -1;
                    }
                }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;
        split_levels(kSub, order, besti1, besti2, L);
        if (scale < 0) {
            for (int j = 0; j < kSub; ++j) L[j] = (int8_t)(2 - L[j]);
            scale = -scale;
            best_shift = -best_shift;
        }
        const float* xx = best_shift == 1 ? kPlus : kMinus;
        const float* xg[kSub / 8] = {xx, xx, xx, xx};
        if (!snap_groups(grid, kSub / 8, xb, weight, scale, xg, L, index))
            scale = refit_scale(grid, kSub / 8, xb, weight, xg, index, scale);
        uint16_t h = 0;
        for (int k = 0; k < kSub / 8; ++k) {
            y->qs[(kSub / 8) * ib + k] = (uint8_t)(index[k] & 255);
            h |= (uint16_t)((index[k] >> 8) << 3 * k);
        }
        y->qh[ib] = h;
        scales[ib] = scale;
        shifts[ib] = (int8_t)best_shift;
        max_scale = max_scale > scale ? max_scale : scale;
    }

    if (!max_scale) return;
    const float d = max_scale / 15;
    y->d = fp32_to_fp16(d * 1.125f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        int l = scale_code(id, scales[ib]);
        if (shifts[ib] == -1) l |= 8;
        y->qh[ib] |= (uint16_t)(l << 12);
    }
}

// Which shift each half of an IQ1_M sub-block takes, by ggml's numbering: 0 (+, +), 1 (+, -),
// 2 (-, +), 3 (-, -); and the sign bits it sets in the sub-block's qh byte.
const float* half_values(int shift, int half) {
    return (half == 0 ? shift < 2 : shift % 2 == 0) ? kPlus : kMinus;
}
constexpr uint8_t kShiftMasks[4] = {0x00, 0x80, 0x08, 0x88};

// One IQ1_M super-block; qwbl may be null.
void quantize_iq1_m_block(const IqGridSearch& grid, const float* xbl, const float* qwbl, block_iq1_m* y) {
    constexpr int kSub = 16;
    float scales[QK_K / kSub];
    int8_t shifts[QK_K / kSub];
    float weight[kSub];
    Sorted order[kSub];
    int8_t L[kSub];
    uint16_t index[kSub / 8];
    uint16_t sc[4] = {};  // y->scales as 4 little-endian words

    std::memset(y->qs, 0, sizeof y->qs);
    std::memset(y->qh, 0, sizeof y->qh);
    std::memset(y->scales, 0, sizeof y->scales);
    float max_scale = 0;
    const float sigma2 = 2 * sum_of_squares(xbl, QK_K) / QK_K;
    auto sub_block_weights = [&](const float* xb, int ib) {
        if (qwbl) {
            importance_weights(kSub, xb, qwbl + kSub * ib, sigma2, weight);
        } else {
            for (int i = 0; i < kSub; ++i) weight[i] = xb[i] * xb[i];
        }
    };

    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        sub_block_weights(xb, ib);
        float max = std::fabs(xb[0]);
        for (int i = 1; i < kSub; ++i) max = max > std::fabs(xb[i]) ? max : std::fabs(xb[i]);
        scales[ib] = 0;
        shifts[ib] = 0;
        if (max < kIq1mGroupMaxEps) continue;

        sort_sub_block(kSub, xb, order);
        // Prefix sums per half (each half may take its own shift). The three values of either
        // shift are one apart, so a split's sum w x q is T v[2] - px[i1] - px[i2] and its sum
        // w q^2 is W v[2]^2 + pw[i1] (v[0]^2 - v[1]^2) + pw[i2] (v[1]^2 - v[2]^2).
        float px[2][kSub + 1], pw[2][kSub + 1];
        px[0][0] = px[1][0] = 0;
        pw[0][0] = pw[1][0] = 0;
        for (int j = 0; j < kSub; ++j) {
            const int i = order[j].i;
            const int h = i < kSub / 2 ? 0 : 1;
            px[h][j + 1] = px[h][j] + weight[i] * xb[i];
            px[1 - h][j + 1] = px[1 - h][j];
            pw[h][j + 1] = pw[h][j] + weight[i];
            pw[1 - h][j + 1] = pw[1 - h][j];
        }
        const float txs[2] = {px[0][kSub], px[1][kSub]};
        const float tws[2] = {pw[0][kSub], pw[1][kSub]};
        const float p2 = kPlus[2], m2 = kMinus[2];
        const float cp1 = kPlus[0] * kPlus[0] - kPlus[1] * kPlus[1];
        const float cp2 = kPlus[1] * kPlus[1] - kPlus[2] * kPlus[2];
        const float cm1 = kMinus[0] * kMinus[0] - kMinus[1] * kMinus[1];
        const float cm2 = kMinus[1] * kMinus[1] - kMinus[2] * kMinus[2];
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_k = -1;
        for (int i1 = 0; i1 <= kSub; ++i1) {
            for (int i2 = i1; i2 <= kSub; ++i2) {
                float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
                for (int h = 0; h < 2; ++h) {
                    const float sx = px[h][i1] + px[h][i2];
                    qx_p[h] = txs[h] * p2 - sx;
                    qx_m[h] = txs[h] * m2 - sx;
                    q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                    q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
                }
                const float sumqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
                const float sumq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
                for (int k = 0; k < 4; ++k) {
                    if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                        scale = sumqx[k] / sumq2[k];
                        best_score = scale * sumqx[k];
                        besti1 = i1;
                        besti2 = i2;
                        best_k = k;
                    }
                }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;
        split_levels(kSub, order, besti1, besti2, L);
        if (scale < 0) {
            for (int j = 0; j < kSub; ++j) L[j] = (int8_t)(2 - L[j]);
            scale = -scale;
            best_k = 3 - best_k;
        }
        const float* xg[2] = {half_values(best_k, 0), half_values(best_k, 1)};
        if (!snap_groups(grid, 2, xb, weight, scale, xg, L, index))
            scale = refit_scale(grid, 2, xb, weight, xg, index, scale);
        y->qs[2 * ib + 0] = (uint8_t)(index[0] & 255);
        y->qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
        y->qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
        scales[ib] = scale;
        shifts[ib] = (int8_t)best_k;
        max_scale = max_scale > scale ? max_scale : scale;
    }

    if (!max_scale) return;
    // The sub-block scales' codes, then the super-block scale refitted to them over all elements.
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const int l = scale_code(id, scales[ib]);
        sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
        y->qh[ib] |= kShiftMasks[shifts[ib]];
        const float* xb = xbl + kSub * ib;
        sub_block_weights(xb, ib);
        for (int k = 0; k < 2; ++k) {
            const float* xx = half_values(shifts[ib], k);
            const int8_t* p = grid.levels(y->qs[2 * ib + k] + ((y->qh[ib] << (8 - 4 * k)) & 0x700));
            for (int j = 0; j < 8; ++j) {
                const float w = weight[8 * k + j];
                const float q = xx[p[j]] * (2 * l + 1);
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t dh = fp32_to_fp16(d * 1.1125f);
    sc[0] |= (uint16_t)((dh & 0x000f) << 12);
    sc[1] |= (uint16_t)((dh & 0x00f0) << 8);
    sc[2] |= (uint16_t)((dh & 0x0f00) << 4);
    sc[3] |= (uint16_t)(dh & 0xf000);
    std::memcpy(y->scales, sc, sizeof y->scales);
}

}  // namespace

void quantize_row_iq1_s_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    const IqGridSearch& grid = iq1_grid_search();
    block_iq1_s* y = (block_iq1_s*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i) quantize_iq1_s_block(grid, x + i * QK_K, imatrix + i * QK_K, &y[i]);
}

void quantize_row_iq1_m_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    const IqGridSearch& grid = iq1_grid_search();
    block_iq1_m* y = (block_iq1_m*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i)
        quantize_iq1_m_block(grid, x + i * QK_K, imatrix ? imatrix + i * QK_K : nullptr, &y[i]);
}

void quantize_row_iq1_m(const float* x, void* vy, int64_t n) { quantize_row_iq1_m_imatrix(x, vy, n, nullptr); }

}  // namespace qref
}  // namespace ei
