#include "engine/state_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "engine/context.h"
#include "model/model.h"

namespace ei {

namespace {

constexpr char kMagic[8] = {'E', 'I', 'S', 'T', 'A', 'T', 'E', '\0'};
// Version 2 gave `reserved` a meaning (kv_flags); a version 1 file has 0 there, which reads the
// same (K not rotated). Version 3 added kv_sink_rows (a centered K, kv/centered_k.h: its blob
// also holds the sink rows and the mean / scale of every layer); versions 1 and 2 have the
// 112-byte header without it and still load into a cache that is not centered.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kOldestVersion = 1;
constexpr uint32_t kHeaderBytesV2 = 112;  // versions 1 and 2
constexpr uint64_t kKvRotatedK = 1;   // kv_flags bit: K head vectors stored Hadamard-rotated
constexpr uint64_t kKvCenteredK = 2;  // kv_flags bit: K stored centered, kv_sink_rows sink rows

struct StateHeader {
    char magic[8];               // kMagic
    uint32_t version;            // kVersion
    uint32_t header_bytes;       // sizeof(StateHeader)
    uint64_t model_fingerprint;  // model_fingerprint() of the model that made the state
    uint64_t model_file_size;
    char arch[32];               // general.architecture, NUL-padded
    uint32_t n_layer;
    uint32_t kv_width;           // values per K (and V) row: n_head_kv * head_dim
    uint32_t type_k, type_v;     // KV cache types (ggml type ids)
    uint64_t n_ctx;              // context size of the saving context (informational)
    uint64_t n_tokens;           // positions saved
    uint64_t kv_bytes;           // bytes of the KV blob
    uint64_t kv_flags;           // kKvRotatedK | kKvCenteredK; other bits 0
    uint32_t kv_sink_rows;       // KvCache::n_sink() (0 unless centered); version 3 on
    uint32_t reserved;           // 0
};
static_assert(sizeof(StateHeader) == 120, "StateHeader must have no padding");

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;

inline uint64_t lane_round(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }

[[noreturn]] void fail(const std::string& path, const std::string& what) {
    throw StateError("cannot load state " + path + ": " + what);
}

bool host_is_little_endian() {
    const uint16_t one = 1;
    uint8_t first;
    std::memcpy(&first, &one, 1);
    return first == 1;
}

}  // namespace

uint64_t hash64(const void* data, size_t n, uint64_t seed) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    uint64_t a = seed + kP1 + kP2, b = seed + kP2, c = seed, d = seed - kP1;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        std::memcpy(w, p + i, 32);
        a = lane_round(a, w[0]);
        b = lane_round(b, w[1]);
        c = lane_round(c, w[2]);
        d = lane_round(d, w[3]);
    }
    uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + (uint64_t)n;
    for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;  // FNV-1a step
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    h *= kP3;
    h ^= h >> 32;
    return h;
}

uint64_t model_fingerprint(const Model& model) {
    const GgufFile& f = *model.file();
    const uint8_t* base = f.bytes();
    const size_t data0 = (size_t)f.data_offset(), size = f.file_size();
    uint64_t h = hash64(base, data0, size);
    // Plus a sample of the weights (two files may share every header byte: a fine-tune, or
    // re-randomized test weights): all of them when small, else 256 spans of 256 bytes spread
    // evenly over the data (a few hundred page reads, well under a millisecond when cached).
    const size_t data_bytes = size > data0 ? size - data0 : 0;
    constexpr size_t kSpans = 256, kSpan = 256;
    if (data_bytes <= kSpans * kSpan * 16) return hash64(base + data0, data_bytes, h);
    for (size_t i = 0; i < kSpans; ++i) {
        const size_t off = data0 + (data_bytes - kSpan) / (kSpans - 1) * i;
        h = hash64(base + off, kSpan, h);
    }
    return h;
}

void save_state(const Context& ctx, const std::string& path, const int32_t* tokens, int64_t n_tokens, int seq) {
    if (!host_is_little_endian()) throw Error("state files are little-endian; this host is not");
    if (n_tokens < 0 || n_tokens > ctx.n_past(seq))
        throw Error("cannot save " + std::to_string(n_tokens) + " tokens: the context holds " +
                    std::to_string(ctx.n_past(seq)));
    ctx.check_whole_sequence(n_tokens, seq, "save");  // a recurrent state is saved whole or not at all
    if (seq == 0) ctx.sync_offloaded_kv(n_tokens);  // rows of layers on an OpenCL device into the host cache
    const KvCache& kv = ctx.kv(seq);
    const HParams& hp = ctx.model().hparams();
    StateHeader h{};
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    h.version = kVersion;
    h.header_bytes = sizeof(StateHeader);
    h.model_fingerprint = model_fingerprint(ctx.model());
    h.model_file_size = ctx.model().file()->file_size();
    std::strncpy(h.arch, hp.arch.c_str(), sizeof h.arch - 1);
    h.n_layer = (uint32_t)kv.n_layer();
    h.kv_width = (uint32_t)kv.width();
    h.type_k = kv.type_k();
    h.type_v = kv.type_v();
    h.n_ctx = (uint64_t)ctx.n_ctx();
    h.n_tokens = (uint64_t)n_tokens;
    h.kv_bytes = kv.rows_bytes(n_tokens);
    h.kv_flags = (kv.k_rotated() ? kKvRotatedK : 0) | (kv.k_centered() ? kKvCenteredK : 0);
    h.kv_sink_rows = (uint32_t)kv.n_sink();

    const size_t tok_bytes = (size_t)n_tokens * sizeof(int32_t);
    std::vector<uint8_t> buf(sizeof h + tok_bytes + h.kv_bytes + sizeof(uint64_t));
    uint8_t* p = buf.data();
    std::memcpy(p, &h, sizeof h);
    if (tok_bytes) std::memcpy(p + sizeof h, tokens, tok_bytes);
    kv.copy_rows_out(n_tokens, p + sizeof h + tok_bytes);
    const uint64_t sum = hash64(p, buf.size() - sizeof sum);
    std::memcpy(p + buf.size() - sizeof sum, &sum, sizeof sum);

    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw Error("cannot write state " + path + ": " + std::strerror(errno));
    // Closed by hand, not by a guard: fclose's own failure (a full disk seen at flush) must count.
    bool ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size() && std::fflush(f) == 0 &&
              ::fsync(::fileno(f)) == 0;
    const int err = errno;
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(ok ? errno : err);
        std::remove(tmp.c_str());
        throw Error("cannot write state " + path + ": " + why);
    }
}

namespace {

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// A state file as read: all its bytes (header, tokens, KV blob, checksum) and its header.
struct StateBytes {
    std::vector<uint8_t> bytes;
    StateHeader header{};   // an older, shorter header leaves the later fields 0
    size_t header_bytes = 0;
};

// Reads `path` whole, once its header is one this build reads and the sizes it implies add up to
// the file's size: a truncated, padded or hostile file fails before anything is allocated for it.
StateBytes read_state_file(const std::string& path) {
    File f(std::fopen(path.c_str(), "rb"));
    if (!f) fail(path, std::strerror(errno));
    std::fseek(f.get(), 0, SEEK_END);
    const long size = std::ftell(f.get());
    std::fseek(f.get(), 0, SEEK_SET);
    StateBytes s;
    StateHeader& h = s.header;
    if (size < (long)kHeaderBytesV2 || std::fread(&h, 1, kHeaderBytesV2, f.get()) != kHeaderBytesV2 ||
        std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
        fail(path, "not an edgeinfer state file (bad magic or shorter than its header)");
    s.header_bytes = h.version >= 3 ? sizeof h : kHeaderBytesV2;
    if (h.version < kOldestVersion || h.version > kVersion || h.header_bytes != s.header_bytes)
        fail(path, "state format version " + std::to_string(h.version) + ", this build reads versions " +
                       std::to_string(kOldestVersion) + " to " + std::to_string(kVersion));
    const size_t extra = s.header_bytes - kHeaderBytesV2;
    if (extra && (size < (long)s.header_bytes ||
                  std::fread(reinterpret_cast<char*>(&h) + kHeaderBytesV2, 1, extra, f.get()) != extra))
        fail(path, "truncated or corrupt (shorter than its header)");
    // Every factor bounded, so that the arithmetic below cannot overflow.
    const bool plausible = h.n_tokens <= (1u << 22) && h.n_layer <= 4096 && h.kv_width <= (1u << 20) &&
                           type_known(h.type_k) && type_known(h.type_v) && h.kv_bytes <= (1ull << 40) &&
                           (h.kv_flags & ~(kKvRotatedK | kKvCenteredK)) == 0 && h.kv_sink_rows <= (1u << 16) &&
                           ((h.kv_flags & kKvCenteredK) != 0) == (h.kv_sink_rows != 0) && h.reserved == 0;
    const uint64_t expect = s.header_bytes + h.n_tokens * sizeof(int32_t) + h.kv_bytes + sizeof(uint64_t);
    if (!plausible || expect != (uint64_t)size)
        fail(path, "truncated or corrupt (the file has " + std::to_string(size) + " bytes, its header implies " +
                       (plausible ? std::to_string(expect) : std::string("an impossible size")) + ")");
    s.bytes.resize((size_t)size);
    std::memcpy(s.bytes.data(), &h, s.header_bytes);
    const size_t rest = s.bytes.size() - s.header_bytes;
    if (std::fread(s.bytes.data() + s.header_bytes, 1, rest, f.get()) != rest) fail(path, "read error");
    return s;
}

// The checksum over everything before it.
void validate_checksum(const std::string& path, const StateBytes& s) {
    uint64_t stored;
    std::memcpy(&stored, s.bytes.data() + s.bytes.size() - sizeof stored, sizeof stored);
    if (hash64(s.bytes.data(), s.bytes.size() - sizeof stored) != stored)
        fail(path, "checksum mismatch (the file is corrupt)");
}

// The state fits `ctx`: the same model, the same KV cache format, room for its tokens.
void check_fits(const std::string& path, const StateHeader& h, const Context& ctx) {
    const KvCache& kv = ctx.kv();
    const HParams& hp = ctx.model().hparams();
    const std::string arch(h.arch, strnlen(h.arch, sizeof h.arch));
    if (h.model_fingerprint != model_fingerprint(ctx.model()) || arch != hp.arch ||
        h.n_layer != (uint64_t)kv.n_layer() || h.kv_width != (uint64_t)kv.width())
        fail(path, "it was saved from a different model (" + arch + ", " + std::to_string(h.n_layer) + " layers, " +
                       std::to_string(h.model_file_size) + "-byte file) than the one loaded (" + hp.arch + ", " +
                       std::to_string(kv.n_layer()) + " layers, " +
                       std::to_string(ctx.model().file()->file_size()) + "-byte file)");
    const bool rotated = (h.kv_flags & kKvRotatedK) != 0;
    if (h.type_k != kv.type_k() || h.type_v != kv.type_v() || rotated != kv.k_rotated() ||
        (int64_t)h.kv_sink_rows != kv.n_sink()) {
        auto describe = [](uint32_t tk, uint32_t tv, bool rot, int64_t n_sink) {
            std::string how = rot ? "rotated" : "";
            if (n_sink > 0) how += (rot ? ", " : "") + std::string("centered, ") + std::to_string(n_sink) + " sink rows";
            return std::string(kv_type_name(tk)) + "/" + kv_type_name(tv) + (how.empty() ? "" : " (K " + how + ")");
        };
        fail(path, "it holds a " + describe(h.type_k, h.type_v, rotated, h.kv_sink_rows) +
                       " KV cache (K/V types) but this context uses " +
                       describe(kv.type_k(), kv.type_v(), kv.k_rotated(), kv.n_sink()));
    }
    if (h.kv_bytes != kv.rows_bytes((int64_t)h.n_tokens)) fail(path, "its KV size does not match its header");
    if ((int64_t)h.n_tokens > ctx.n_ctx())
        fail(path, "it holds " + std::to_string(h.n_tokens) + " tokens but the context has room for " +
                       std::to_string(ctx.n_ctx()));
}

}  // namespace

std::vector<int32_t> load_state(Context& ctx, const std::string& path, int seq) {
    const StateBytes s = read_state_file(path);
    validate_checksum(path, s);
    const StateHeader& h = s.header;
    check_fits(path, h, ctx);
    std::vector<int32_t> tokens(h.n_tokens);
    const uint8_t* data = s.bytes.data() + s.header_bytes;
    if (!tokens.empty()) std::memcpy(tokens.data(), data, tokens.size() * sizeof(int32_t));
    for (int32_t t : tokens)
        if (t < 0 || t >= ctx.n_vocab()) fail(path, "token id " + std::to_string(t) + " is outside the vocabulary");
    ctx.restore_kv((int64_t)h.n_tokens, (int64_t)h.n_tokens, data + tokens.size() * sizeof(int32_t),
                   (size_t)h.kv_bytes, seq);
    return tokens;
}

}  // namespace ei
