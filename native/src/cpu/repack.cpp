// The packed Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS
// layouts (cpu/repack.h): repacking, and the scalar references of the packed GEMV/GEMMs in the
// types' own order (Q4_0; the others in FloatOrder::fast) that every ISA's kernel is tested
// against bit for bit.
#include "cpu/repack.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "common/error.h"
#include "common/fp16.h"
#include "common/weight_arena.h"
#include "cpu/kernels.h"
#include "quant/blocks.h"
#include "quant/ref.h"
#include "quant/types.h"

namespace ei {

namespace {

bool has_packed_layout(uint32_t type) {
    return type == TYPE_Q4_0 || type == TYPE_Q4_1 || type == TYPE_Q5_0 || type == TYPE_Q5_1 || type == TYPE_Q8_0 ||
           type == TYPE_Q2_K || type == TYPE_Q3_K || type == TYPE_Q4_K || type == TYPE_Q5_K || type == TYPE_Q6_K ||
           type == TYPE_IQ4_NL || type == TYPE_IQ4_XS;
}

// Elements of a block (a row's unit of repacking).
constexpr int64_t block_elems(uint32_t type) {
    return type == TYPE_Q2_K || type == TYPE_Q3_K || type == TYPE_Q4_K || type == TYPE_Q5_K || type == TYPE_Q6_K ||
                   type == TYPE_IQ4_XS
               ? QK_K
               : QK4_0;
}

// Bytes of a block's qs: 4-byte pieces, qs[i][t] for t < kQsBytes / 4.
constexpr size_t qs_bytes(uint32_t type) { return type == TYPE_Q8_0 ? QK8_0 : QK4_0 / 2; }

constexpr size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

// The 16 rows of one group from blocks of any of the packed types (the same qs packing, 4 pieces
// of 4 bytes a block, 8 for Q8_0; Q4_1 adds m, Q5_0 qh, Q5_1 both).
template <class Block>
void repack_group(const uint8_t* src, size_t src_row_bytes, int64_t nb, const PackedLayout& lay, uint8_t* out) {
    constexpr int kPieces = sizeof(Block::qs) / 4;
    uint16_t* d = reinterpret_cast<uint16_t*>(out);           // [nb][16]
    uint16_t* m = reinterpret_cast<uint16_t*>(out + lay.m);  // [nb][16]
    uint8_t* qh = out + lay.qh;                               // [nb][4][16]
    uint8_t* qs = out + lay.qs;                               // [nb][kPieces][16][4]
    for (int64_t j = 0; j < kPackRows; ++j) {
        const Block* x = reinterpret_cast<const Block*>(src + j * src_row_bytes);
        for (int64_t i = 0; i < nb; ++i) {
            d[i * kPackRows + j] = x[i].d;
            if constexpr (std::is_same_v<Block, block_q4_1> || std::is_same_v<Block, block_q5_1>)
                m[i * kPackRows + j] = x[i].m;
            for (int t = 0; t < kPieces; ++t) {
                std::memcpy(qs + ((i * kPieces + t) * kPackRows + j) * 4, x[i].qs + 4 * t, 4);
                if constexpr (std::is_same_v<Block, block_q5_0> || std::is_same_v<Block, block_q5_1>) {
                    uint32_t bits;
                    std::memcpy(&bits, x[i].qh, 4);
                    const uint32_t lo = (bits >> (4 * t)) & 15, hi = (bits >> (16 + 4 * t)) & 15;
                    qh[(i * 4 + t) * kPackRows + j] = (uint8_t)(lo | hi << 4);
                }
            }
        }
    }
}

// Where element e (0..255) of row j of a Q6_K group's super-block sits (layout in cpu/repack.h):
// the byte with its low 4 bits (and the shift to them) and the byte with its high 2 bits (and theirs).
struct Q6Place {
    size_t lo, hi;
    int lo_shift, hi_shift;
};
Q6Place q6_place(int e, int64_t j) {
    const int s = e / 16, b = e % 4, p = e % 16 / 4;  // sub-block, byte in the row's 4, piece 0..3
    const size_t line = (size_t)s * kQ6SubBlockBytes + (size_t)j * 4 + b;
    return {line + 64 * (p % 2), line + 128, 4 * (p / 2), 2 * p};
}

// A row's 4 bytes of a piece as one little-endian word, so that the 2-, 3- and 6-bit repackings
// below move four values at a time: repacking runs once per weight at load, and a value at a time
// it dominated a large model's load (figures in docs/PERFORMANCE.md, "Measurements behind code choices").
inline uint32_t load4(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline void store4(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// The 2 bits of elements 16s + 4p + b (b = 0..3, a byte each) of a q2_K / q3_K block's qs, laid out
// as quant/ref_kquants.cpp reads them (element 128n + 32k + l at bits 2k of qs[32n + l]).
inline uint32_t q2_piece(const uint8_t* qs, int s, int p) {
    return load4(qs + 32 * (s / 8) + 16 * (s % 2) + 4 * p) >> (2 * (s % 8 / 2)) & 0x03030303u;
}

// The high bits of the same elements of a q3_K block (element e's at bit e / 32 of hmask[e % 32]).
inline uint32_t q3_high_piece(const uint8_t* hmask, int s, int p) {
    return load4(hmask + 16 * (s % 2) + 4 * p) >> (s / 2) & 0x01010101u;
}

// Sub-block s's 2-bit line of one row (layout in cpu/repack.h): piece p at bits 2p of each byte.
inline uint32_t q2_line(const uint8_t* qs, int s) {
    return q2_piece(qs, s, 0) | q2_piece(qs, s, 1) << 2 | q2_piece(qs, s, 2) << 4 | q2_piece(qs, s, 3) << 6;
}

// The 16 rows of one Q2_K group (layout in cpu/repack.h).
void repack_group_q2_K(const uint8_t* src, size_t src_row_bytes, int64_t nb, const PackedLayout& lay, uint8_t* out) {
    uint16_t* d = reinterpret_cast<uint16_t*>(out);             // [nb][16]
    uint16_t* dmin = reinterpret_cast<uint16_t*>(out + lay.m);  // [nb][16]
    uint8_t* sc = out + lay.sc;                                 // [nb][16][16]
    uint8_t* qs = out + lay.qs;                                 // [nb][16][16][4]
    for (int64_t j = 0; j < kPackRows; ++j) {
        const block_q2_K* x = reinterpret_cast<const block_q2_K*>(src + j * src_row_bytes);
        for (int64_t i = 0; i < nb; ++i) {
            d[i * kPackRows + j] = x[i].d;
            dmin[i * kPackRows + j] = x[i].dmin;
            for (int s = 0; s < 16; ++s) {
                sc[(i * 16 + s) * kPackRows + j] = x[i].scales[s];
                store4(qs + (i * 16 + s) * kQ2SubBlockBytes + j * 4, q2_line(x[i].qs, s));
            }
        }
    }
}

// The 16 rows of one Q3_K group (layout in cpu/repack.h).
void repack_group_q3_K(const uint8_t* src, size_t src_row_bytes, int64_t nb, const PackedLayout& lay, uint8_t* out) {
    uint16_t* d = reinterpret_cast<uint16_t*>(out);             // [nb][16]
    int8_t* sc = reinterpret_cast<int8_t*>(out + lay.sc);       // [nb][16][16]
    uint8_t* qs = out + lay.qs;                                 // [nb][8][3][16][4]
    for (int64_t j = 0; j < kPackRows; ++j) {
        const block_q3_K* x = reinterpret_cast<const block_q3_K*>(src + j * src_row_bytes);
        for (int64_t i = 0; i < nb; ++i) {
            d[i * kPackRows + j] = x[i].d;
            int scales[16];
            ref::unpack_scales_q3(x[i].scales, scales);
            for (int s = 0; s < 16; ++s) sc[(i * 16 + s) * kPackRows + j] = (int8_t)scales[s];
            for (int u = 0; u < 8; ++u) {
                uint8_t* pair = qs + (i * 8 + u) * kQ3SubBlockPairBytes + j * 4;
                uint32_t high = 0;
                for (int r = 0; r < 2; ++r) {
                    store4(pair + 64 * r, q2_line(x[i].qs, 2 * u + r));
                    for (int p = 0; p < 4; ++p) high |= q3_high_piece(x[i].hmask, 2 * u + r, p) << (4 * r + p);
                }
                store4(pair + 128, high);
            }
        }
    }
}

// The 16 rows of one Q6_K group (layout in cpu/repack.h). Element e = 16s + 4p + b of a stored
// block, as ref::q6_K_value reads it: its low 4 bits at ql[64h + 32(k & 1) + l] >> 4(k >> 1), its
// high 2 at qh[32h + l] >> 2k (h = s / 8, k = s % 8 / 2, l = 16(s % 2) + 4p + b).
void repack_group_q6_K(const uint8_t* src, size_t src_row_bytes, int64_t nb, const PackedLayout& lay, uint8_t* out) {
    uint16_t* d = reinterpret_cast<uint16_t*>(out);             // [nb][16]
    int8_t* sc = reinterpret_cast<int8_t*>(out + lay.sc);       // [nb][16][16]
    uint8_t* qs = out + lay.qs;                                 // [nb][16][3][16][4]
    for (int64_t j = 0; j < kPackRows; ++j) {
        const block_q6_K* x = reinterpret_cast<const block_q6_K*>(src + j * src_row_bytes);
        for (int64_t i = 0; i < nb; ++i) {
            d[i * kPackRows + j] = x[i].d;
            for (int s = 0; s < QK_K / 16; ++s) {
                sc[(i * 16 + s) * kPackRows + j] = x[i].scales[s];
                const int h = s / 8, k = s % 8 / 2, l = 16 * (s % 2);
                uint32_t low[4], high = 0;
                for (int p = 0; p < 4; ++p) {
                    low[p] = load4(x[i].ql + 64 * h + 32 * (k & 1) + l + 4 * p) >> (4 * (k >> 1)) & 0x0F0F0F0Fu;
                    high |= (load4(x[i].qh + 32 * h + l + 4 * p) >> (2 * k) & 0x03030303u) << (2 * p);
                }
                uint8_t* line = qs + (i * 16 + s) * kQ6SubBlockBytes + j * 4;
                store4(line, low[0] | low[2] << 4);
                store4(line + 64, low[1] | low[3] << 4);
                store4(line + 128, high);
            }
        }
    }
}

// The 16 rows of one IQ4_XS group (layout in cpu/repack.h).
void repack_group_iq4_xs(const uint8_t* src, size_t src_row_bytes, int64_t nb, const PackedLayout& lay,
                         uint8_t* out) {
    uint16_t* d = reinterpret_cast<uint16_t*>(out);        // [nb][16]
    int8_t* sc = reinterpret_cast<int8_t*>(out + lay.sc);  // [nb][8][16]
    uint8_t* qs = out + lay.qs;                            // [nb][8][4][16][4]
    for (int64_t j = 0; j < kPackRows; ++j) {
        const block_iq4_xs* x = reinterpret_cast<const block_iq4_xs*>(src + j * src_row_bytes);
        for (int64_t i = 0; i < nb; ++i) {
            d[i * kPackRows + j] = x[i].d;
            for (int s = 0; s < QK_K / 32; ++s) {
                const int ls = ((x[i].scales_l[s / 2] >> 4 * (s % 2)) & 15) | ((x[i].scales_h >> 2 * s) & 3) << 4;
                sc[(i * 8 + s) * kPackRows + j] = (int8_t)(ls - 32);
                for (int t = 0; t < 4; ++t)
                    std::memcpy(qs + (((i * 8 + s) * 4 + t) * kPackRows + j) * 4, x[i].qs + 16 * s + 4 * t, 4);
            }
        }
    }
}

// The 16 rows of one Q4_K or Q5_K group (layout in cpu/repack.h).
template <class Block>
void repack_group_q45_K(const uint8_t* src, size_t src_row_bytes, int64_t nb, const PackedLayout& lay, uint8_t* out) {
    uint16_t* d = reinterpret_cast<uint16_t*>(out);             // [nb][16]
    uint16_t* dmin = reinterpret_cast<uint16_t*>(out + lay.m);  // [nb][16]
    uint8_t* sc = out + lay.sc;                                 // [nb][256]
    uint8_t* qh = out + lay.qh;                                 // Q5_K: [nb][4][8][16]
    uint8_t* qs = out + lay.qs;                                 // [nb][4][8][16][4]
    for (int64_t j = 0; j < kPackRows; ++j) {
        const Block* x = reinterpret_cast<const Block*>(src + j * src_row_bytes);
        for (int64_t i = 0; i < nb; ++i) {
            d[i * kPackRows + j] = x[i].d;
            dmin[i * kPackRows + j] = x[i].dmin;
            uint8_t scales[8], mins[8];
            ref::unpack_scales_k4(x[i].scales, scales, mins);
            uint8_t* s = sc + i * 256;
            for (int sb = 0; sb < 8; ++sb) {
                s[16 * sb + j] = scales[sb];
                s[128 + 32 * (sb / 2) + 2 * j + sb % 2] = mins[sb];
            }
            for (int c = 0; c < 4; ++c)
                for (int t = 0; t < 8; ++t) {
                    const int64_t piece = (i * 4 + c) * 8 + t;
                    std::memcpy(qs + (piece * kPackRows + j) * 4, x[i].qs + 32 * c + 4 * t, 4);
                    if constexpr (std::is_same_v<Block, block_q5_K>) {
                        // Element 64c + 4t + b's fifth bit (bit 2c of qh[4t + b]) to bit b, 64c + 32 +
                        // 4t + b's (bit 2c + 1) to bit 4 + b: each byte's bit, at bits 0, 8, 16, 24 of a
                        // word, gathered into bits 24..27 by one multiply (no two products meet).
                        const uint32_t w = load4(x[i].qh + 4 * t) >> (2 * c);
                        const uint32_t lo = (w & 0x01010101u) * 0x01020408u >> 24 & 15;
                        const uint32_t hi = (w >> 1 & 0x01010101u) * 0x01020408u >> 24 & 15;
                        qh[piece * kPackRows + j] = (uint8_t)(lo | hi << 4);
                    }
                }
        }
    }
}

}  // namespace

Tensor stacked_matrix(const Tensor& t, int64_t i) {
    Tensor m = t;
    m.ne[2] = 1;
    m.data = t.data + (size_t)(i * t.rows()) * t.row_bytes;
    if (t.packed)
        m.packed = std::shared_ptr<const uint8_t>(t.packed, t.packed.get() + (size_t)(i * t.rows() / kPackRows) *
                                                                               t.packed_group_bytes);
    return m;
}

bool packed_layout_supported(uint32_t type, int64_t rows, int64_t cols) {
    return has_packed_layout(type) && rows > 0 && rows % kPackRows == 0 && cols > 0 && cols % block_elems(type) == 0;
}

PackedLayout packed_layout(uint32_t type, int64_t cols) {
    if (!has_packed_layout(type)) throw Error(std::string("no packed layout for ") + type_info(type).name);
    const size_t nb = (size_t)(cols / block_elems(type));
    PackedLayout lay;
    if (type == TYPE_Q6_K) {
        lay.m = nb * kPackRows * sizeof(uint16_t);  // (no minimums: where d ends)
        lay.sc = lay.qh = align64(lay.m);
        lay.qs = lay.sc + nb * 16 * kPackRows;      // sc: 256 bytes a super-block, a multiple of 64
        lay.group = lay.qs + nb * 16 * kQ6SubBlockBytes;
        return lay;
    }
    if (type == TYPE_Q4_K || type == TYPE_Q5_K) {
        lay.m = nb * kPackRows * sizeof(uint16_t);  // dmin, after d
        lay.sc = align64(2 * lay.m);
        lay.qh = lay.sc + nb * 256;                 // sc: 256 bytes a super-block, a multiple of 64
        lay.qs = lay.qh + (type == TYPE_Q5_K ? nb * 32 * kPackRows : 0);  // qh: 512 bytes a super-block
        lay.group = lay.qs + nb * kPackRows * QK_K / 2;
        return lay;
    }
    if (type == TYPE_Q2_K) {
        lay.m = nb * kPackRows * sizeof(uint16_t);  // dmin, after d
        lay.sc = lay.qh = align64(2 * lay.m);
        lay.qs = lay.sc + nb * 16 * kPackRows;      // sc: 256 bytes a super-block, a multiple of 64
        lay.group = lay.qs + nb * 16 * kQ2SubBlockBytes;
        return lay;
    }
    if (type == TYPE_Q3_K) {
        lay.m = nb * kPackRows * sizeof(uint16_t);  // (no minimums: where d ends)
        lay.sc = lay.qh = align64(lay.m);
        lay.qs = lay.sc + nb * 16 * kPackRows;      // sc: 256 bytes a super-block, a multiple of 64
        lay.group = lay.qs + nb * 8 * kQ3SubBlockPairBytes;
        return lay;
    }
    if (type == TYPE_IQ4_XS) {
        lay.m = nb * kPackRows * sizeof(uint16_t);  // (no minimums: where d ends)
        lay.sc = lay.qh = align64(lay.m);
        lay.qs = lay.sc + nb * 8 * kPackRows;       // sc: 128 bytes a super-block, a multiple of 64
        lay.group = lay.qs + nb * kPackRows * QK_K / 2;
        return lay;
    }
    lay.m = nb * kPackRows * sizeof(uint16_t);                      // after d
    lay.qh = align64(lay.m + (packed_has_minimums(type) ? lay.m : 0));      // after d (and m)
    lay.qs = lay.qh + (packed_has_fifth_bits(type) ? nb * 4 * kPackRows : 0);  // qh: 64 bytes a block
    lay.group = lay.qs + nb * kPackRows * qs_bytes(type);           // qs: 16 rows x 16 (32) bytes a block
    return lay;
}

size_t packed_group_bytes(uint32_t type, int64_t cols) { return packed_layout(type, cols).group; }

void repack_rows(uint32_t type, const uint8_t* src, size_t src_row_bytes, int64_t rows, int64_t cols, uint8_t* dst) {
    if (!packed_layout_supported(type, rows, cols))
        throw Error(std::string("cannot repack a ") + type_info(type).name + " tensor of " + std::to_string(rows) +
                    " rows of " + std::to_string(cols));
    const int64_t nb = cols / block_elems(type);
    const PackedLayout lay = packed_layout(type, cols);
    for (int64_t g = 0; g < rows / kPackRows; ++g) {
        uint8_t* out = dst + g * lay.group;
        std::memset(out, 0, lay.qh);  // padding after the scales
        const uint8_t* rows_in = src + g * kPackRows * src_row_bytes;
        switch (type) {
            case TYPE_Q4_1: repack_group<block_q4_1>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q5_0: repack_group<block_q5_0>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q5_1: repack_group<block_q5_1>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q8_0: repack_group<block_q8_0>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q2_K: repack_group_q2_K(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q3_K: repack_group_q3_K(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q4_K: repack_group_q45_K<block_q4_K>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q5_K: repack_group_q45_K<block_q5_K>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_Q6_K: repack_group_q6_K(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_IQ4_NL: repack_group<block_iq4_nl>(rows_in, src_row_bytes, nb, lay, out); break;
            case TYPE_IQ4_XS: repack_group_iq4_xs(rows_in, src_row_bytes, nb, lay, out); break;
            default: repack_group<block_q4_0>(rows_in, src_row_bytes, nb, lay, out); break;
        }
    }
}

std::shared_ptr<const uint8_t> make_packed(uint32_t type, const uint8_t* src, size_t src_row_bytes, int64_t rows,
                                           int64_t cols) {
    const size_t bytes = packed_group_bytes(type, cols) * (size_t)(rows / kPackRows);
    std::shared_ptr<uint8_t> buf = alloc_weight_bytes(bytes);  // in huge pages where the OS grants them
    repack_rows(type, src, src_row_bytes, rows, cols, buf.get());
    return buf;
}

bool repack_enabled() {
    static const bool enabled = [] {
        const char* env = std::getenv("EDGEINFER_REPACK");
        return !(env && std::string(env) == "0");
    }();
    return enabled;
}

namespace {

// One block's exact integer sum of row j of a group against an activation block (q_w the stored
// value: a nibble 0..15, Q5_0's and Q5_1's 5-bit value 0..31, Q8_0's signed byte, or IQ4_NL's table value of
// its nibble). Q4_0 and Q5_0 subtract their offsets (8, 16) here.
template <uint32_t Type, class Act>
int32_t packed_block_isum(const uint8_t* qs, const uint8_t* qh, int64_t i, int64_t j, const Act& act) {
    int32_t isum = 0;
    if constexpr (Type == TYPE_Q8_0) {
        for (int t = 0; t < 8; ++t)
            for (int b = 0; b < 4; ++b)
                isum += (int8_t)qs[((i * 8 + t) * kPackRows + j) * 4 + b] * act.qs[4 * t + b];
        return isum;
    }
    for (int t = 0; t < 4; ++t)
        for (int b = 0; b < 4; ++b) {
            const uint8_t byte = qs[((i * 4 + t) * kPackRows + j) * 4 + b];
            int32_t lo = byte & 15, hi = byte >> 4;
            if constexpr (packed_has_fifth_bits(Type)) {  // (layout in repack.h)
                const uint8_t h = qh[(i * 4 + t) * kPackRows + j];
                lo |= ((h >> b) & 1) << 4;
                hi |= ((h >> (4 + b)) & 1) << 4;
            }
            if constexpr (Type == TYPE_IQ4_NL) {
                lo = kIq4nlValues[lo];
                hi = kIq4nlValues[hi];
            }
            isum += lo * act.qs[4 * t + b] + hi * act.qs[16 + 4 * t + b];
        }
    if constexpr (Type == TYPE_Q4_0 || Type == TYPE_Q5_0) {  // the stored values' offset: 8, 16
        int32_t asum = 0;
        for (int e = 0; e < QK8_0; ++e) asum += act.qs[e];
        isum -= (Type == TYPE_Q5_0 ? 16 : 8) * asum;
    }
    return isum;
}

// The reference of TypeKernels::gemm_16row_groups in the packed types' own order (formula in
// cpu/repack.h): Q4_0 always, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL in FloatOrder::fast.
template <uint32_t Type>
void gemm_packed_ref(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                     size_t a_stride, float* y, int64_t ldy) {
    using Act = std::conditional_t<packed_has_minimums(Type), block_q8_1, block_q8_0>;
    const int64_t nb = k / QK4_0;
    const PackedLayout lay = packed_layout(Type, k);
    for (int64_t c = 0; c < n; ++c) {
        const Act* act = reinterpret_cast<const Act*>(static_cast<const uint8_t*>(a) + c * a_stride);
        for (int64_t r = 0; r < m; ++r) {
            const uint8_t* grp = static_cast<const uint8_t*>(w) + (r / kPackRows) * w_stride;
            const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
            const uint16_t* mins = reinterpret_cast<const uint16_t*>(grp + lay.m);
            const int64_t j = r % kPackRows;
            float acc = 0.0f, acc_m = 0.0f;
            for (int64_t i = 0; i < nb; ++i) {
                const int32_t isum = packed_block_isum<Type>(grp + lay.qs, grp + lay.qh, i, j, act[i]);
                const float dd = fp16_to_fp32(d[i * kPackRows + j]) * fp16_to_fp32(act[i].d);
                acc = std::fma((float)isum, dd, acc);
                if constexpr (packed_has_minimums(Type))
                    acc_m = std::fma(fp16_to_fp32(mins[i * kPackRows + j]), fp16_to_fp32(act[i].s), acc_m);
            }
            y[c * ldy + r] = packed_has_minimums(Type) ? acc + acc_m : acc;
        }
    }
}

// Super-block i's exact integer sum of row j of a Q6_K group against an activation block:
// sum_s sc_w[s] * (sum_{e in s} q_w[e] * q_a[e] - 32 * bsums_a[s]) (formula in cpu/repack.h).
int32_t superblock_isum_q6_K(const uint8_t* grp, const PackedLayout& lay, int64_t i, int64_t j, const block_q8_K& act) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    const uint8_t* q = grp + lay.qs + i * 16 * kQ6SubBlockBytes;
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
        int32_t sub = -32 * act.bsums[s];  // the stored values' offset
        for (int e = 16 * s; e < 16 * s + 16; ++e) {
            const Q6Place at = q6_place(e, j);
            const int v = (q[at.lo] >> at.lo_shift & 15) | (q[at.hi] >> at.hi_shift & 3) << 4;
            sub += v * act.qs[e];
        }
        isum += sc[(i * 16 + s) * kPackRows + j] * sub;
    }
    return isum;
}

// Super-block i's two exact integer sums of row j of a Q2_K group (formula in cpu/repack.h): the
// scaled values' and the minimums'.
void superblock_isums_q2_K(const uint8_t* grp, const PackedLayout& lay, int64_t i, int64_t j, const block_q8_K& act,
                           int32_t* isum, int32_t* imin) {
    *isum = *imin = 0;
    for (int s = 0; s < 16; ++s) {
        const uint8_t* line = grp + lay.qs + (i * 16 + s) * kQ2SubBlockBytes + j * 4;
        int32_t sub = 0;
        for (int p = 0; p < 4; ++p)
            for (int b = 0; b < 4; ++b) sub += (line[b] >> (2 * p) & 3) * act.qs[16 * s + 4 * p + b];
        const uint8_t sm = grp[lay.sc + (i * 16 + s) * kPackRows + j];
        *isum += (sm & 15) * sub;
        *imin += (sm >> 4) * act.bsums[s];
    }
}

// The same for Q3_K: sum_s sc_w[s] * (sum_{e in s} q_w[e] * q_a[e] - 4 * bsums_a[s]).
int32_t superblock_isum_q3_K(const uint8_t* grp, const PackedLayout& lay, int64_t i, int64_t j, const block_q8_K& act) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    int32_t isum = 0;
    for (int s = 0; s < 16; ++s) {
        const uint8_t* pair = grp + lay.qs + (i * 8 + s / 2) * kQ3SubBlockPairBytes + j * 4;
        int32_t sub = -4 * act.bsums[s];  // the stored values' offset
        for (int p = 0; p < 4; ++p)
            for (int b = 0; b < 4; ++b) {
                const int v = (pair[64 * (s % 2) + b] >> (2 * p) & 3) | (pair[128 + b] >> (4 * (s % 2) + p) & 1) << 2;
                sub += v * act.qs[16 * s + 4 * p + b];
            }
        isum += sc[(i * 16 + s) * kPackRows + j] * sub;
    }
    return isum;
}

// The same for IQ4_XS: sum_s sc_w[s] * sum_{e in s} v(q_w[e]) * q_a[e].
int32_t superblock_isum_iq4_xs(const uint8_t* grp, const PackedLayout& lay, int64_t i, int64_t j,
                               const block_q8_K& act) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(grp + lay.sc);
    const uint8_t* qs = grp + lay.qs;
    int32_t isum = 0;
    for (int s = 0; s < 8; ++s) {
        const int8_t* aq = act.qs + 32 * s;
        int32_t sub = 0;
        for (int t = 0; t < 4; ++t)
            for (int b = 0; b < 4; ++b) {
                const uint8_t byte = qs[(((i * 8 + s) * 4 + t) * kPackRows + j) * 4 + b];
                sub += kIq4nlValues[byte & 15] * aq[4 * t + b] + kIq4nlValues[byte >> 4] * aq[16 + 4 * t + b];
            }
        isum += sc[(i * 8 + s) * kPackRows + j] * sub;
    }
    return isum;
}

// Super-block i's two exact integer sums of row j of a Q4_K or Q5_K group against an activation
// block: isum = sum_s sc_w[s] * sum_{e in s} q_w[e] * q_a[e] and imin = sum_s mn_w[s] * bs_a[s]
// (formula in cpu/repack.h).
template <uint32_t Type>
void superblock_isums_q45_K(const uint8_t* grp, const PackedLayout& lay, int64_t i, int64_t j, const block_q8_K& act,
                            int32_t* isum, int32_t* imin) {
    const uint8_t* s = grp + lay.sc + i * 256;
    const uint8_t* qs = grp + lay.qs;
    *isum = *imin = 0;
    for (int c = 0; c < 4; ++c) {
        int32_t lo = 0, hi = 0;  // sub-blocks 2c and 2c + 1
        for (int t = 0; t < 8; ++t) {
            const int64_t piece = (i * 4 + c) * 8 + t;
            const int fifth = Type == TYPE_Q5_K ? grp[lay.qh + piece * kPackRows + j] : 0;
            for (int b = 0; b < 4; ++b) {
                const uint8_t byte = qs[(piece * kPackRows + j) * 4 + b];
                lo += ((byte & 15) | ((fifth >> b) & 1) << 4) * act.qs[64 * c + 4 * t + b];
                hi += ((byte >> 4) | ((fifth >> (4 + b)) & 1) << 4) * act.qs[64 * c + 32 + 4 * t + b];
            }
        }
        *isum += s[16 * (2 * c) + j] * lo + s[16 * (2 * c + 1) + j] * hi;
    }
    for (int sb = 0; sb < 8; ++sb)
        *imin += s[128 + 32 * (sb / 2) + 2 * j + sb % 2] * (act.bsums[2 * sb] + act.bsums[2 * sb + 1]);
}

// The reference of the super-block types' gemm_16row_groups in FloatOrder::fast (formulas in
// cpu/repack.h): per output, one FMA a super-block of its exact integer sum, times d_w * d_a; Q2_K,
// Q4_K and Q5_K subtract a second chain, their minimums' sums times dmin_w * d_a.
template <uint32_t Type>
void gemm_packed_ref_superblocks(int64_t k, int64_t m, int64_t n, const void* w, size_t w_stride, const void* a,
                                 size_t a_stride, float* y, int64_t ldy) {
    constexpr bool kMinimums = Type == TYPE_Q2_K || Type == TYPE_Q4_K || Type == TYPE_Q5_K;
    const int64_t nb = k / QK_K;
    const PackedLayout lay = packed_layout(Type, k);
    for (int64_t c = 0; c < n; ++c) {
        const block_q8_K* act = reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(a) + c * a_stride);
        for (int64_t r = 0; r < m; ++r) {
            const uint8_t* grp = static_cast<const uint8_t*>(w) + (r / kPackRows) * w_stride;
            const uint16_t* d = reinterpret_cast<const uint16_t*>(grp);
            const uint16_t* dmin = reinterpret_cast<const uint16_t*>(grp + lay.m);  // Q2_K, Q4_K, Q5_K
            const int64_t j = r % kPackRows;
            float acc = 0.0f, acc_m = 0.0f;
            for (int64_t i = 0; i < nb; ++i) {
                int32_t isum = 0, imin = 0;
                if constexpr (Type == TYPE_Q2_K) superblock_isums_q2_K(grp, lay, i, j, act[i], &isum, &imin);
                else if constexpr (kMinimums) superblock_isums_q45_K<Type>(grp, lay, i, j, act[i], &isum, &imin);
                else if constexpr (Type == TYPE_Q6_K) isum = superblock_isum_q6_K(grp, lay, i, j, act[i]);
                else if constexpr (Type == TYPE_Q3_K) isum = superblock_isum_q3_K(grp, lay, i, j, act[i]);
                else isum = superblock_isum_iq4_xs(grp, lay, i, j, act[i]);
                acc = std::fma((float)isum, fp16_to_fp32(d[i * kPackRows + j]) * act[i].d, acc);
                if constexpr (kMinimums)
                    acc_m = std::fma((float)imin, fp16_to_fp32(dmin[i * kPackRows + j]) * act[i].d, acc_m);
            }
            y[c * ldy + r] = kMinimums ? acc - acc_m : acc;
        }
    }
}

}  // namespace

void fill_gemm_packed_scalar(KernelTable& t) { t.types[TYPE_Q4_0].gemm_16row_groups = gemm_packed_ref<TYPE_Q4_0>; }

void fill_gemm_packed_fast_scalar(KernelTable& t) {
    t.types[TYPE_Q4_1].gemm_16row_groups = gemm_packed_ref<TYPE_Q4_1>;
    t.types[TYPE_Q5_0].gemm_16row_groups = gemm_packed_ref<TYPE_Q5_0>;
    t.types[TYPE_Q5_1].gemm_16row_groups = gemm_packed_ref<TYPE_Q5_1>;
    t.types[TYPE_Q8_0].gemm_16row_groups = gemm_packed_ref<TYPE_Q8_0>;
    t.types[TYPE_Q2_K].gemm_16row_groups = gemm_packed_ref_superblocks<TYPE_Q2_K>;
    t.types[TYPE_Q3_K].gemm_16row_groups = gemm_packed_ref_superblocks<TYPE_Q3_K>;
    t.types[TYPE_Q4_K].gemm_16row_groups = gemm_packed_ref_superblocks<TYPE_Q4_K>;
    t.types[TYPE_Q5_K].gemm_16row_groups = gemm_packed_ref_superblocks<TYPE_Q5_K>;
    t.types[TYPE_Q6_K].gemm_16row_groups = gemm_packed_ref_superblocks<TYPE_Q6_K>;
    t.types[TYPE_IQ4_NL].gemm_16row_groups = gemm_packed_ref<TYPE_IQ4_NL>;
    t.types[TYPE_IQ4_XS].gemm_16row_groups = gemm_packed_ref_superblocks<TYPE_IQ4_XS>;
}

}  // namespace ei
