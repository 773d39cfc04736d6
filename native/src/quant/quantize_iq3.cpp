// Quantizers of IQ3_XXS and IQ3_S (ggml's quantize_iq3_xxs / quantize_iq3_s, which llama-quantize
// runs with or without an importance matrix; without one the weights are x^2).
//
// Every group of 4 magnitudes must land on a grid point (256 for IQ3_XXS, 512 for IQ3_S; each
// coordinate a code l in 0..7, value 2l + 1). Per sub-block of 32 the signs are split off, the
// scale is searched over the trial inverses (15 + 0.2 is) / max, and for each trial every group is
// rounded to codes; a group whose codes are not a grid point takes its best neighbour (least
// weighted squared error among the grid points at the 2 (IQ3_XXS) or 3 (IQ3_S) smallest
// distances from it, precomputed per off-grid point: the search tables below). The trial
// maximising (sum w x q)^2 / (sum w q^2) wins; off-grid groups are then re-rounded with its
// least-squares scale, and the scale refitted. The 8 sub-block scales become 4-bit codes against
// the super-block's d = max_scale / 31.
//
// IQ3_XXS stores 7 sign bits per 8 elements (the 8th follows by even parity), so a group of 8 with
// an odd number of negatives has its least important element's sign flipped before the search.
//
// ggml's quirks are kept, since they decide the bytes: IQ3_S advances its qs and signs write
// positions only for sub-blocks that are not all zero (a zero sub-block shifts the later ones
// down; its high index bits are written at the unshifted position), and IQ3_XXS tests a sub-block
// against 1e-8 where IQ3_S tests max == 0.
//
// Every float operation is written in ggml's order, unfused (this unit is built for the baseline
// target), because the chosen grid points depend on exact comparisons.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/fp16.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/quantize.h"
#include "quant/quantize_math.h"

namespace ei {
namespace qref {

namespace {

constexpr int kMaxQ = 8;  // codes 0..7
constexpr int kSub = 32;  // sub-block size of both types
constexpr int kCodeSpace = 1 << 12;  // 4 codes of 3 bits
constexpr float kGroupMaxEpsIq3xxs = 1e-8f;

// ggml's iq3xs_init_impl tables for one grid, built once.
struct Iq3SearchTables {
    std::vector<uint32_t> grid;  // [grid_size] 4 bytes 2l + 1 per point
    // [kCodeSpace] for the codes u = l0 | l1 << 3 | l2 << 6 | l3 << 9: the index of the grid point
    // u is, or -(1 + offset) of u's list in neighbours
    std::vector<int> map;
    // per off-grid u: the count n, then n grid indices by ascending distance, then index
    std::vector<uint16_t> neighbours;
};

// Builds the tables from one of the dequantization grids (quant/iq_grids.h): byte i of point k is
// magnitudes[l] for code l of coordinate i. n_distances: how many of the smallest squared
// distances from an off-grid point count as its neighbours (ggml's nwant).
Iq3SearchTables make_search_tables(const uint32_t* dequant_grid, int grid_size, const uint8_t magnitudes[kMaxQ],
                                   int n_distances) {
    Iq3SearchTables t;
    t.grid.resize(grid_size);
    t.map.assign(kCodeSpace, -1);
    for (int k = 0; k < grid_size; ++k) {
        uint32_t point = 0;
        int u = 0;
        for (int i = 0; i < 4; ++i) {
            const uint8_t v = (uint8_t)(dequant_grid[k] >> 8 * i);
            int l = 0;
            while (magnitudes[l] != v) ++l;
            point |= (uint32_t)(2 * l + 1) << 8 * i;
            u |= l << 3 * i;
        }
        t.grid[k] = point;
        t.map[u] = k;
    }
    std::vector<int> dist2(grid_size);
    for (int u = 0; u < kCodeSpace; ++u) {
        if (t.map[u] >= 0) continue;
        int pos[4];
        for (int i = 0; i < 4; ++i) pos[i] = 2 * ((u >> 3 * i) & 7) + 1;
        for (int j = 0; j < grid_size; ++j) {
            int d2 = 0;
            for (int i = 0; i < 4; ++i) {
                const int diff = (int)(uint8_t)(t.grid[j] >> 8 * i) - pos[i];
                d2 += diff * diff;
            }
            dist2[j] = d2;
        }
        // ggml sorts the points by (distance, index) and keeps those at the n_distances
        // smallest distances: the same list, distance by distance, each in index order.
        t.map[u] = -(1 + (int)t.neighbours.size());
        const size_t count_at = t.neighbours.size();
        t.neighbours.push_back(0);
        int floor = -1;
        for (int nd = 0; nd < n_distances; ++nd) {
            int d = INT32_MAX;
            for (int j = 0; j < grid_size; ++j)
                if (dist2[j] > floor && dist2[j] < d) d = dist2[j];
            if (d == INT32_MAX) break;
            for (int j = 0; j < grid_size; ++j)
                if (dist2[j] == d) t.neighbours.push_back((uint16_t)j);
            floor = d;
        }
        t.neighbours[count_at] = (uint16_t)(t.neighbours.size() - count_at - 1);
    }
    return t;
}

// Initialised on first use (thread-safe: function-local statics).
const Iq3SearchTables& iq3xxs_tables() {
    static const uint8_t magnitudes[kMaxQ] = {4, 12, 20, 28, 36, 44, 52, 62};
    static const Iq3SearchTables t = make_search_tables(kIq3xxsGrid, 256, magnitudes, 2);
    return t;
}

const Iq3SearchTables& iq3s_tables() {
    static const uint8_t magnitudes[kMaxQ] = {1, 3, 5, 7, 9, 11, 13, 15};
    static const Iq3SearchTables t = make_search_tables(kIq3sGrid, 512, magnitudes, 3);
    return t;
}

// ggml's iq3_find_best_neighbour: the neighbour of least weighted squared error at `scale`
// (the first on ties); writes its codes to L and returns its index. Where every error overflows
// to inf (values near 1e15), ggml aborts; this takes the first neighbour, so that such a row
// still quantizes (to nothing useful) instead of ending the process.
int best_neighbour(const Iq3SearchTables& t, int u, const float* xval, const float* weight, float scale, int8_t* L) {
    const uint16_t* neighbours = t.neighbours.data() - t.map[u] - 1;
    float best_d2 = FLT_MAX;
    int grid_index = neighbours[1];
    for (int j = 1; j <= neighbours[0]; ++j) {
        const uint32_t point = t.grid[neighbours[j]];
        float d2 = 0;
        for (int i = 0; i < 4; ++i) {
            const float q = (float)(uint8_t)(point >> 8 * i);
            const float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            grid_index = neighbours[j];
        }
    }
    const uint32_t point = t.grid[grid_index];
    for (int i = 0; i < 4; ++i) L[i] = (int8_t)(((uint8_t)(point >> 8 * i) - 1) / 2);
    return grid_index;
}

// The codes of group xval[0..3] rounded at inverse scale id, as u.
int round_group(const float* xval, float id, int8_t* L) {
    int u = 0;
    for (int i = 0; i < 4; ++i) {
        const int l = nearest_int(0.5f * (id * xval[i] - 1));
        L[i] = (int8_t)clamp(l, 0, kMaxQ - 1);
        u |= L[i] << 3 * i;
    }
    return u;
}

// How the two types' sub-block searches differ.
struct Iq3Variant {
    const Iq3SearchTables& tables;
    int n_steps;         // trial scales (2 kMaxQ - 1 + 0.2 is) / max, is = -n_steps..n_steps
    bool refit_on_grid;  // whether the final re-rounding also redoes groups already on the grid
};

// The scale search of one sub-block: xval the magnitudes (with IQ3_XXS's parity flip), weight and
// waux = sqrt(weight) per element, max the largest xval. Returns the scale (as fitted, maybe
// negative) and the codes in L; grid[k] of every group g = 4k is the index of its point.
float fit_sub_block(const Iq3Variant& v, const float* xval, const float* weight, const float* waux, float max,
                    int8_t* L, int* grid) {
    const Iq3SearchTables& t = v.tables;
    constexpr int kGroups = kSub / 4;
    int8_t Laux[kSub];
    bool on_grid[kGroups], on_grid_aux[kGroups];
    std::memset(L, 0, kSub);  // the codes if no trial scale wins (all weights zero)
    float best = 0;
    float scale = max / (2 * kMaxQ - 1);
    // IQ3_XXS starts with every group counted as on the grid, IQ3_S with none (as in ggml; it
    // matters only when no trial wins).
    for (int k = 0; k < kGroups; ++k) on_grid[k] = !v.refit_on_grid;
    for (int is = -v.n_steps; is <= v.n_steps; ++is) {
        const float id = (2 * kMaxQ - 1 + is * 0.2f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < kGroups; ++k) {
            const int u = round_group(xval + 4 * k, id, Laux + 4 * k);
            on_grid_aux[k] = t.map[u] >= 0;
            if (!on_grid_aux[k]) best_neighbour(t, u, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
        }
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < kSub; ++i) {
            const float w = weight[i];
            const float q = 2 * Laux[i] + 1;
            sumqx += w * xval[i] * q;
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, Laux, kSub);
            for (int k = 0; k < kGroups; ++k) on_grid[k] = on_grid_aux[k];
        }
    }
    int n_off_grid = 0;
    for (int k = 0; k < kGroups; ++k) n_off_grid += !on_grid[k];
    if (n_off_grid > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < kGroups; ++k) {
            if (on_grid[k] && !v.refit_on_grid) continue;
            int8_t Lk[4];
            const int u = round_group(xval + 4 * k, id, Lk);
            std::memcpy(L + 4 * k, Lk, 4);
            if (t.map[u] < 0) best_neighbour(t, u, xval + 4 * k, waux + 4 * k, scale, L + 4 * k);
        }
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < kSub; ++i) {
            const float w = weight[i];
            const float q = 2 * L[i] + 1;
            sumqx += w * xval[i] * q;
            sumq2 += w * q * q;
        }
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    for (int k = 0; k < kGroups; ++k) {
        int u = 0;
        for (int i = 0; i < 4; ++i) u |= L[4 * k + i] << 3 * i;
        grid[k] = t.map[u];  // on the grid by construction
    }
    return scale;
}

// The weights of a sub-block: importance weights, or x^2 without an imatrix; waux = sqrt(w).
void sub_block_weights(const float* xb, const float* qw, float sigma2, float* weight, float* waux) {
    if (qw) importance_weights(kSub, xb, qw, sigma2, weight);
    else
        for (int i = 0; i < kSub; ++i) weight[i] = xb[i] * xb[i];
    for (int i = 0; i < kSub; ++i) waux[i] = std::sqrt(weight[i]);
}

// xval[0..7] = |xb[0..7]|; returns the sign bits (bit i: xb[i] < 0).
uint8_t split_signs(const float* xb, float* xval) {
    uint8_t s = 0;
    for (int i = 0; i < 8; ++i) {
        if (xb[i] >= 0) {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            s |= (uint8_t)(1 << i);
        }
    }
    return s;
}

// The largest of a sub-block's xval, compared as ggml's MAX.
float largest(const float* xval) {
    float max = xval[0];
    for (int i = 1; i < kSub; ++i) max = max > xval[i] ? max : xval[i];
    return max;
}

float super_block_sigma2(const float* xbl) {
    const float sumx2 = sum_of_squares(xbl, QK_K);
    return 2 * sumx2 / QK_K;
}

void quantize_iq3_xxs_super_block(const float* xbl, const float* qw, block_iq3_xxs* y) {
    const Iq3Variant variant{iq3xxs_tables(), 15, false};
    uint8_t q3[3 * QK_K / 8] = {};     // 64 grid indices, then 8 uint32 of signs and scale
    uint32_t signs_and_scales[QK_K / kSub] = {};
    float scales[QK_K / kSub];
    y->d = fp32_to_fp16(0.f);
    float max_scale = 0;
    const float sigma2 = super_block_sigma2(xbl);
    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        float weight[kSub], waux[kSub], xval[kSub];
        sub_block_weights(xb, qw ? qw + kSub * ib : nullptr, sigma2, weight, waux);
        uint8_t block_signs[4];
        for (int k = 0; k < 4; ++k) {
            uint8_t s = split_signs(xb + 8 * k, xval + 8 * k);
            if (__builtin_popcount(s) % 2) {
                // Odd: the sign of the element that matters least goes wrong.
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
            block_signs[k] = s & 127;
        }
        const float max = largest(xval);
        if (max < kGroupMaxEpsIq3xxs) {
            scales[ib] = 0;
            continue;
        }
        int8_t L[kSub];
        int grid[kSub / 4];
        float scale = fit_sub_block(variant, xval, weight, waux, max, L, grid);
        if (scale < 0) {  // cannot happen (ggml guards it): scales are stored unsigned
            scale = -scale;
            for (int k = 0; k < 4; ++k) block_signs[k] = (uint8_t)(~block_signs[k] & 127);
        }
        for (int k = 0; k < kSub / 4; ++k) q3[8 * ib + k] = (uint8_t)grid[k];
        signs_and_scales[ib] = block_signs[0] | (uint32_t)block_signs[1] << 7 | (uint32_t)block_signs[2] << 14 |
                               (uint32_t)block_signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        std::memset(y->qs, 0, sizeof(y->qs));
        return;
    }
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const int l = clamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
        signs_and_scales[ib] |= (uint32_t)l << 28;
    }
    std::memcpy(q3 + QK_K / 4, signs_and_scales, sizeof(signs_and_scales));  // little-endian host
    std::memcpy(y->qs, q3, sizeof(y->qs));
}

void quantize_iq3_s_super_block(const float* xbl, const float* qw, block_iq3_s* y) {
    const Iq3Variant variant{iq3s_tables(), 9, true};
    std::memset(y, 0, sizeof(*y));
    y->d = fp32_to_fp16(0.f);
    uint8_t* qs = y->qs;        // advanced past non-zero sub-blocks only (ggml's write positions)
    uint8_t* signs = y->signs;  // likewise
    float scales[QK_K / kSub];
    float max_scale = 0;
    const float sigma2 = super_block_sigma2(xbl);
    for (int ib = 0; ib < QK_K / kSub; ++ib) {
        const float* xb = xbl + kSub * ib;
        float weight[kSub], waux[kSub], xval[kSub];
        sub_block_weights(xb, qw ? qw + kSub * ib : nullptr, sigma2, weight, waux);
        uint8_t block_signs[kSub / 8];
        for (int k = 0; k < kSub / 8; ++k) block_signs[k] = split_signs(xb + 8 * k, xval + 8 * k);
        const float max = largest(xval);
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        int8_t L[kSub];
        int grid[kSub / 4];
        float scale = fit_sub_block(variant, xval, weight, waux, max, L, grid);
        if (scale < 0) {  // cannot happen (ggml guards it): scales are stored unsigned
            scale = -scale;
            for (int k = 0; k < kSub / 8; ++k) block_signs[k] = (uint8_t)~block_signs[k];
        }
        for (int k = 0; k < kSub / 4; ++k) {
            const int g = ib * (kSub / 4) + k;
            qs[k] = (uint8_t)(grid[k] & 255);
            y->qh[g / 8] |= (uint8_t)((grid[k] >> 8) << (g % 8));
        }
        qs += kSub / 4;
        for (int k = 0; k < kSub / 8; ++k) signs[k] = block_signs[k];
        signs += kSub / 8;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = fp32_to_fp16(d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < QK_K / kSub; ib += 2) {
        const int l1 = clamp(nearest_int(0.5f * (id * scales[ib + 0] - 1)), 0, 15);
        const int l2 = clamp(nearest_int(0.5f * (id * scales[ib + 1] - 1)), 0, 15);
        y->scales[ib / 2] = (uint8_t)(l1 | l2 << 4);
    }
}

}  // namespace

void quantize_row_iq3_xxs(const float* x, void* vy, int64_t n) { quantize_row_iq3_xxs_imatrix(x, vy, n, nullptr); }

void quantize_row_iq3_s(const float* x, void* vy, int64_t n) { quantize_row_iq3_s_imatrix(x, vy, n, nullptr); }

void quantize_row_iq3_xxs_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_iq3_xxs* y = (block_iq3_xxs*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i)
        quantize_iq3_xxs_super_block(x + i * QK_K, imatrix ? imatrix + i * QK_K : nullptr, &y[i]);
}

void quantize_row_iq3_s_imatrix(const float* x, void* vy, int64_t n, const float* imatrix) {
    block_iq3_s* y = (block_iq3_s*)vy;
    for (int64_t i = 0; i < n / QK_K; ++i)
        quantize_iq3_s_super_block(x + i * QK_K, imatrix ? imatrix + i * QK_K : nullptr, &y[i]);
}

}  // namespace qref
}  // namespace ei
