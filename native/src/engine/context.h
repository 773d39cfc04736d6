// A Context is one conversation's state over a Model: the KV cache, the scratch buffers, the
// thread pool and the logits of the last decode. `decode` is the one native call per prompt
// chunk or generated token; nothing inside it calls back into Python.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "cpu/batch_order.h"
#include "engine/activation_stats.h"
#include "gpu/offload_types.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace ei {

namespace cl {
class Offload;
}

class Context {
public:
    // n_ctx: positions the KV cache holds; n_threads <= 0: physical cores; n_batch: tokens per
    // forward chunk (bounds scratch memory; long prompts are split into chunks).
    // type_k/type_v: KV cache types (TYPE_F16, TYPE_Q8_0, TYPE_Q4_0; kv_type_from_name);
    // rotate_k: store K rotated (kv/hadamard.h; kv_rotate_k_by_default says where it pays);
    // center_k: store K centered (kv/centered_k.h; kv_center_k_by_default).
    // offload: layers to run on an OpenCL device (gpu/offload.h; empty: none). Their KV cache lives
    // on the device in the host cache's format (types, rotation, centering: gpu/device_kv.h), and so do
    // their convolution states; the host cache keeps a staging copy of both (sync_offloaded_kv).
    // n_seq: sequences the context holds (parallel requests), each with its own cache of n_ctx
    // positions; sequence 0 is the one every single-sequence call below works on.
    Context(std::shared_ptr<const Model> model, int64_t n_ctx, int n_threads, int64_t n_batch = 512,
            uint32_t type_k = TYPE_F16, uint32_t type_v = TYPE_F16, bool rotate_k = false, bool center_k = false,
            const cl::OffloadRequest& offload = {}, int n_seq = 1);
    ~Context();

    // Every single-sequence call below takes the sequence it works on (`seq`, default 0: the only
    // one of a context made with n_seq = 1). A sequence's calls never touch another's cache.

    // Runs tokens[0..n) at positions n_past(seq) .. n_past(seq)+n-1 and keeps their K/V. Afterwards
    // logits() holds one row for each of tokens[first_logit..n) (n - 1: the last token's only;
    // n: none). Rows before first_logit are not computed past the last layer's K/V.
    // Throws ContextOverflowError (nothing changed) if the tokens do not fit, Error for a bad id.
    // order: llama.cpp's for this batch (a prompt), or per_row: every token as decoding it alone
    // would give (cpu/batch_order.h; the CPU's layers: offloaded ones compute as the device does).
    // A sequence's decode runs the same code on its own cache, so it gives what sequence 0 gives.
    void decode(const int32_t* tokens, int64_t n, int64_t first_logit, BatchOrder order = BatchOrder::llama_cpp,
                int seq = 0);

    // Logits of the last decode: [n_logit_rows][n_vocab]. The buffer is shared so a caller's
    // zero-copy view stays valid after later decodes (which write to another buffer while a view
    // of this one is alive: see use_logits_buffer).
    const std::shared_ptr<std::vector<float>>& logits_buffer() const { return logits_; }
    int64_t n_logit_rows() const { return n_logit_rows_; }
    int64_t n_vocab() const { return model_->hparams().n_vocab; }

    int64_t n_past(int seq = 0) const;
    // Forgets positions >= n (for reusing a common prefix). n is clamped to [0, n_past].
    void truncate(int64_t n, int seq = 0);

    // Context overflow: drops positions [n_keep, n_keep + n_discard) and moves the later ones down,
    // re-rotating their keys by -n_discard positions (the architecture's RoPE). Throws Error
    // (nothing changed) unless 0 <= n_keep, 0 < n_discard and n_keep + n_discard <= n_past.
    void shift(int64_t n_keep, int64_t n_discard, int seq = 0);

    // KV rows of positions [0, n) as one blob (prefix snapshots): its size, a copy out (n <=
    // n_past), and a restore from a blob of n_stored positions that keeps its first n_use
    // (n_past = n_use). restore_kv throws StateError (nothing changed) if the blob's size is not
    // the one this cache makes or the positions do not fit. Every sequence's cache has the same
    // format, so a blob from one restores into any other.
    size_t kv_rows_bytes(int64_t n) const { return kv_.rows_bytes(n); }
    void copy_kv_out(int64_t n, uint8_t* dst, int seq = 0) const;
    void restore_kv(int64_t n_stored, int64_t n_use, const uint8_t* src, size_t size, int seq = 0);

    // A sequence's host KV cache. With offloaded layers (sequence 0 only) their rows live on the
    // device: call sync_offloaded_kv(n) before reading positions [0, n) of those layers here
    // (copy_kv_out and shift do; the forward never needs it).
    const KvCache& kv(int seq = 0) const;
    void sync_offloaded_kv(int64_t n) const;
    int64_t n_ctx() const { return kv_.n_ctx(); }
    int64_t n_batch() const { return n_batch_; }
    int n_threads() const { return pool_.size(); }
    size_t kv_bytes() const { return kv_.bytes(); }
    const Model& model() const { return *model_; }
    // The OpenCL offload, or nullptr when every layer runs on the CPU.
    const cl::Offload* offload() const { return offload_.get(); }

    // Sums every matmul input of the decodes that follow into a new ActivationStats (what
    // `edgeinfer imatrix` collects; include_output: the output head's input too), until
    // stop_activation_stats. Throws Error when layers are offloaded (their inputs stay on the device).
    void start_activation_stats(bool include_output);
    void stop_activation_stats() { env_.activation_stats = nullptr; }
    // What the last start collected (nullptr before any).
    const ActivationStats* activation_stats() const { return stats_.get(); }

    // Whether the model keeps a recurrent state per sequence beside the KV cache (LFM2's short
    // convolutions, KvCache::recurrent_state). That state describes a sequence's last position
    // only: truncate to 0 < n < n_past, shift, and snapshots or copies of a prefix short of
    // n_past are refused (Error naming it); truncate(0) starts the sequence afresh, and whole
    // snapshots, saved states and copies carry the state.
    bool recurrent() const { return model_->arch().decoder().has_conv_layers(); }
    // Throws Error naming the recurrent state unless n is the sequence's end (no-op on other models).
    void check_whole_sequence(int64_t n, int seq, const char* what) const;

    // ---- several sequences (engine/context_sequences.cpp) ------------------------------------
    int n_seq() const { return 1 + (int)more_kv_.size(); }
    // Sequence dst becomes a copy of the first n positions of sequence src (a shared prefix).
    void seq_copy(int src, int dst, int64_t n);
    // One forward over tokens of several sequences: tokens[i] goes to sequence seq_ids[i], after
    // that sequence's cached positions and its earlier tokens in this batch (a sequence's tokens
    // need not be adjacent). Logits for the rows whose want_logits[i] is set (nullptr: the last
    // token of each sequence present), in row order. Every token is computed as decoding it alone
    // would compute it (BatchOrder::per_row): what one sequence generates never depends on what
    // else shares its batch. Everything is checked first (ids, sequences, room in each cache:
    // ContextOverflowError naming the sequence); on an error nothing has changed.
    void decode_sequences(const int32_t* tokens, const int32_t* seq_ids, const uint8_t* want_logits, int64_t n);

    // ---- embeddings (engine/context_embed.cpp) -----------------------------------------------
    // One input's embedding (llama.cpp's --embeddings): tokens[0..n) from position 0 in sequence 0,
    // whose cache is emptied first and left empty; a decoder runs in chunks of n_batch in
    // llama.cpp's order, an encoder in one pass. Writes pooled_size(pooling, ...) floats to out
    // (arch/pooling.h). ContextOverflowError if n > n_ctx.
    void embed(const int32_t* tokens, int64_t n, Pooling pooling, float* out);
    // Many inputs: input i is tokens[i][0..lens[i]), its embedding written to outs[i]. An encoder
    // packs consecutive inputs into passes of up to n_batch tokens (an input longer than that
    // goes alone); a decoder embeds them one by one. Either way an input gets the floats it gets
    // alone. Every input is checked before any is run: on an error nothing is written.
    void embed(const int32_t* const* tokens, const int64_t* lens, int64_t count, Pooling pooling, float* const* outs);

private:
    std::shared_ptr<const Model> model_;
    int64_t n_batch_;
    ThreadPool pool_;
    KvCache kv_;
    std::unique_ptr<cl::Offload> offload_;
    ForwardEnv env_;
    std::shared_ptr<std::vector<float>> logits_;
    // Buffers a decode moved away from because Python still viewed them; reused once it no longer
    // does (see use_logits_buffer).
    std::vector<std::shared_ptr<std::vector<float>>> spare_logits_;
    void use_logits_buffer(size_t n_floats);
    int64_t n_logit_rows_ = 0;
    int64_t n_past_ = 0;
    std::unique_ptr<ActivationStats> stats_;
    // Sequences 1 .. n_seq - 1: their caches and cached position counts.
    std::vector<std::unique_ptr<KvCache>> more_kv_;
    std::vector<int64_t> more_past_;
    KvCache& seq_kv(int seq) { return seq == 0 ? kv_ : *more_kv_[(size_t)seq - 1]; }
    const KvCache& seq_kv(int seq) const { return seq == 0 ? kv_ : *more_kv_[(size_t)seq - 1]; }
    int64_t& seq_past(int seq) { return seq == 0 ? n_past_ : more_past_[(size_t)seq - 1]; }
    int64_t seq_past(int seq) const { return seq == 0 ? n_past_ : more_past_[(size_t)seq - 1]; }
    void check_seq(int seq, const char* what) const;
};

}  // namespace ei
