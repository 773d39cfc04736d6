// Search tables of the lattice i-quant quantizers (quant/iq_grid_search.h).
//
// ggml sorts all grid points by (distance, index) for every off-grid key and keeps the prefix up
// to the n-th distinct distance. Distances here are sums of squared level differences (ggml's, on
// the 2 l + 1 scale, are 4 times these: the same order), at most 8 * 2^2, so a bucket per distance
// gives the same list in one pass. Only keys of levels 0..2 get a list: the quantizers clamp every
// level to 2, so they never look up another key (ggml builds lists for those too, unused).
#include "quant/iq_grid_search.h"

#include <array>
#include <cstddef>
#include <utility>

#include "quant/iq1_grids.h"
#include "quant/iq_grids.h"

namespace ei {
namespace qref {

namespace {

constexpr int kKeys = 0xAAAA + 2;  // one past the largest key of levels <= 2 (ggml's kmap_size)
constexpr int kMaxDistance = 8 * 4;

bool levels_of_key(int u, int8_t* l) {
    for (int i = 0; i < 8; ++i) {
        l[i] = (int8_t)((u >> 2 * i) & 3);
        if (l[i] > 2) return false;
    }
    return true;
}

// The levels of a grid whose points are 8 bytes, each byte one of `values` (level 0, 1, 2).
template <std::size_t N>
std::vector<int8_t> grid_levels(const uint64_t (&grid)[N], const std::array<uint8_t, 3>& values) {
    std::vector<int8_t> levels(8 * N);
    for (std::size_t g = 0; g < N; ++g)
        for (int i = 0; i < 8; ++i) {
            const uint8_t b = (uint8_t)(grid[g] >> 8 * i);
            levels[8 * g + i] = (int8_t)(b == values[0] ? 0 : b == values[1] ? 1 : 2);
        }
    return levels;
}

}  // namespace

IqGridSearch::IqGridSearch(std::vector<int8_t> levels, int n_nearest)
    : levels_(std::move(levels)), index_(kKeys, -1), offset_(kKeys, -1) {
    const int n_grid = grid_size();
    for (int g = 0; g < n_grid; ++g) index_[key(this->levels(g))] = g;

    std::vector<uint16_t> by_distance[kMaxDistance + 1];
    int8_t l[8];
    for (int u = 0; u < kKeys; ++u) {
        if (index_[u] >= 0 || !levels_of_key(u, l)) continue;
        for (auto& bucket : by_distance) bucket.clear();
        for (int g = 0; g < n_grid; ++g) {
            const int8_t* p = this->levels(g);
            int d2 = 0;
            for (int i = 0; i < 8; ++i) d2 += (p[i] - l[i]) * (p[i] - l[i]);
            by_distance[d2].push_back((uint16_t)g);
        }
        offset_[u] = (int32_t)neighbours_.size();
        neighbours_.push_back(0);
        int n_distances = 0;
        for (const auto& bucket : by_distance) {
            if (bucket.empty()) continue;
            neighbours_.insert(neighbours_.end(), bucket.begin(), bucket.end());
            if (++n_distances == n_nearest) break;
        }
        neighbours_[offset_[u]] = (uint16_t)(neighbours_.size() - offset_[u] - 1);
    }
}

const IqGridSearch& iq2xxs_grid_search() {
    static const IqGridSearch search(grid_levels(kIq2xxsGrid, {0x08, 0x19, 0x2b}), 2);
    return search;
}

const IqGridSearch& iq2xs_grid_search() {
    static const IqGridSearch search(grid_levels(kIq2xsGrid, {0x08, 0x19, 0x2b}), 2);
    return search;
}

const IqGridSearch& iq2s_grid_search() {
    static const IqGridSearch search(grid_levels(kIq2sGrid, {0x08, 0x19, 0x2b}), 1);
    return search;
}

const IqGridSearch& iq1_grid_search() {
    static const IqGridSearch search(grid_levels(kIq1sGrid, {0xff, 0x00, 0x01}), 3);
    return search;
}

}  // namespace qref
}  // namespace ei
