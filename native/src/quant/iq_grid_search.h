// Search tables of the quantizers of the 8-element lattice i-quants (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ1_S, IQ1_M; quant/quantize_iq2.cpp, quant/quantize_iq1.cpp): ggml's kmap_q2xs and
// kneighbors_q2xs, as iq2xs_init_impl builds them.
//
// A group of 8 elements is quantized to levels l[i] in {0, 1, 2} (the value 2 l + 1 on IQ2's
// {1, 3, 5} scale; -1, 0, 1 for IQ1), packed 2 bits each into a key u = sum l[i] << 2i. The grid
// holds only some of those keys. For a key on the grid, `index(u)` is its grid index; for one
// off it, `neighbours(u)` lists the grid points nearest to it in squared distance over the 2 l + 1
// coordinates: every point whose distance is among the `n_nearest` smallest distinct distances
// (2 for IQ2_XXS / IQ2_XS, 1 for IQ2_S, 3 for IQ1), by distance then grid index. The quantizers
// try them in that order and keep the first best, so the order is part of the bytes.
//
// Each table is built once, at first use, behind a function-local static (thread-safe), and is
// read-only afterwards: any number of threads may quantize at the same time.
#pragma once
#include <cstdint>
#include <vector>

namespace ei {
namespace qref {

class IqGridSearch {
public:
    // The key of 8 levels (each 0..2).
    static int key(const int8_t* l) {
        int u = 0;
        for (int i = 0; i < 8; ++i) u |= l[i] << 2 * i;
        return u;
    }
    // Grid index of key u, or -1 if u is not a grid point.
    int index(int u) const { return index_[u]; }
    // The grid points nearest to off-grid key u: count, then that many grid indices.
    const uint16_t* neighbours(int u) const { return neighbours_.data() + offset_[u]; }
    // The 8 levels (0..2) of grid point g.
    const int8_t* levels(int g) const { return levels_.data() + 8 * g; }
    int grid_size() const { return (int)levels_.size() / 8; }

    // levels: grid_size * 8 levels in 0..2, point by point.
    IqGridSearch(std::vector<int8_t> levels, int n_nearest);

private:
    std::vector<int8_t> levels_;        // [grid_size][8]
    std::vector<int32_t> index_;        // [kKeys]: grid index, or -1
    std::vector<int32_t> offset_;       // [kKeys]: start of the key's list in neighbours_ (off-grid keys)
    std::vector<uint16_t> neighbours_;  // per off-grid key: count, then grid indices
};

// The tables of the IQ2_XXS, IQ2_XS, IQ2_S grids (quant/iq_grids.h) and of the IQ1 grid shared by
// IQ1_S and IQ1_M (quant/iq1_grids.h).
const IqGridSearch& iq2xxs_grid_search();
const IqGridSearch& iq2xs_grid_search();
const IqGridSearch& iq2s_grid_search();
const IqGridSearch& iq1_grid_search();

}  // namespace qref
}  // namespace ei
