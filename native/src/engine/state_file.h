// Saved context states: the tokens a context has decoded and their KV rows, in a file that can
// be trusted when it loads.
//
// Layout (little-endian):
//   StateHeader                       magic, version, model fingerprint, KV layout, counts
//   int32  tokens[n_tokens]           the token ids at positions 0 .. n_tokens-1
//   uint8  kv[kv_bytes]               per layer: K rows of those positions, then V rows, then
//                                     for a centered K its sink rows and mean / scale
//                                     (KvCache::copy_rows_out's blob, in the cache's K/V types)
//   uint64 checksum                   hash64 of every byte before it
//
// Saving writes a temporary file next to the target, flushes it to disk and renames it over the
// target, so a crash mid-write never leaves a file that loads. Loading reads and checks the whole
// file (size, magic, version, checksum, then that the model, the KV layout and the context size
// match) before the cache is touched: any failure throws StateError and changes nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ei {

class Context;
class Model;

// A 64-bit non-cryptographic hash (four multiply-rotate lanes over 8-byte words, FNV-1a for the
// tail, a final avalanche): fast enough to run over a KV blob at memory speed.
uint64_t hash64(const void* data, size_t n, uint64_t seed = 0);

// Identifies a model file cheaply: hash64 of its GGUF header, metadata and tensor table (every
// byte before the tensor data: names, shapes, types, offsets, vocabulary), its size and a sample
// of the tensor data (all of it up to 1 MiB, else 256 spans of 256 bytes spread over it).
uint64_t model_fingerprint(const Model& model);

// Writes tokens[0..n_tokens) and the KV rows of those positions of sequence `seq` (n_tokens <=
// ctx.n_past(seq)). Throws Error if the file cannot be written (the target is then left as it was).
void save_state(const Context& ctx, const std::string& path, const int32_t* tokens, int64_t n_tokens, int seq = 0);

// Restores a saved state into sequence `seq` of ctx (its n_past = the token count) and returns
// its tokens. Throws StateError (ctx unchanged) for a missing, corrupt, truncated or foreign file.
std::vector<int32_t> load_state(Context& ctx, const std::string& path, int seq = 0);

}  // namespace ei
