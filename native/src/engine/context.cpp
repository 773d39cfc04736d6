#include "engine/context.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "cpu/kernels.h"
#include "gpu/offload.h"

namespace ei {

namespace {
int64_t checked_n_ctx(int64_t n_ctx) {
    if (n_ctx < 1 || n_ctx > (1 << 22)) throw Error("n_ctx must be in 1..4194304, got " + std::to_string(n_ctx));
    return n_ctx;
}

// The offloaded layers on their device, weights uploaded; nullptr if none are requested. Any
// architecture's layers: each is the decoder's layer with its weights and its settings for this
// context (gpu/offload.h).
std::unique_ptr<cl::Offload> make_offload(const Model& model, const cl::OffloadRequest& req, int64_t n_ctx,
                                          int64_t n_batch, KvCache& kv) {
    if (req.layers.empty()) return nullptr;
    const ArchModel& arch = model.arch();
    if (arch.is_encoder())
        throw Error("an encoder (" + model.hparams().arch + ") runs on the CPU: it has no layers to offload");
    const DecoderModel& decoder = arch.decoder();
    // The device keeps the host cache's format, K rotated and centered included (gpu/device_kv.h).
    std::vector<int> conv_layers;
    for (size_t il = 0; il < decoder.layers.size(); ++il)
        if (decoder.layers[il].conv_in.present()) conv_layers.push_back((int)il);
    auto offload = std::make_unique<cl::Offload>(req, (int64_t)decoder.layers.size(), n_ctx, n_batch, decoder.shapes,
                                                 decoder.fused_width(), kv, conv_layers);
    for (int il : offload->layers()) offload->upload(il, decoder.layers[il], arch.layer_config(il, n_ctx));
    return offload;
}
// An encoder keeps nothing between calls: its cache has no layers (and takes no memory).
int64_t cached_layers(const Model& model) { return model.arch().is_encoder() ? 0 : model.hparams().n_layer; }
}  // namespace

Context::Context(std::shared_ptr<const Model> model, int64_t n_ctx, int n_threads, int64_t n_batch, uint32_t type_k,
                 uint32_t type_v, bool rotate_k, bool center_k, const cl::OffloadRequest& offload, int n_seq)
    : model_(std::move(model)),
      n_batch_(std::max<int64_t>(1, n_batch)),
      pool_(n_threads > 0 ? n_threads : physical_core_count()),
      kv_(model_->kernels(), cached_layers(*model_), checked_n_ctx(n_ctx), model_->hparams().kv_width(),
          model_->hparams().head_dim, type_k, type_v, rotate_k, center_k),
      offload_(make_offload(*model_, offload, n_ctx, n_batch_, kv_)),
      env_{pool_, model_->kernels(), &kv_, {}, {}, offload_.get()},
      logits_(std::make_shared<std::vector<float>>()) {
    if (n_seq < 1 || n_seq > 256) throw Error("n_seq must be in 1..256, got " + std::to_string(n_seq));
    if (n_seq > 1 && offload_) throw Error("several sequences (n_seq > 1) cannot run with layers offloaded to a GPU yet");
    const HParams& hp = model_->hparams();
    for (int s = 1; s < n_seq; ++s) {
        more_kv_.push_back(std::make_unique<KvCache>(model_->kernels(), cached_layers(*model_), n_ctx, hp.kv_width(),
                                                     hp.head_dim, type_k, type_v, rotate_k, center_k));
        more_past_.push_back(0);
    }
    // Each sequence's convolution state: [l_cache - 1][n_embd] floats a layer (layers/shortconv_layer.h).
    if (recurrent())
        for (int s = 0; s < n_seq; ++s) seq_kv(s).add_recurrent_state((hp.conv_l_cache - 1) * hp.n_embd);
}

void Context::check_whole_sequence(int64_t n, int seq, const char* what) const {
    if (!recurrent() || n == seq_past(seq)) return;
    throw Error(std::string("cannot ") + what + " " + std::to_string(n) + " of the " + std::to_string(seq_past(seq)) +
                " cached positions: " + model_->hparams().arch +
                "'s short-convolution layers keep a recurrent state that holds only the sequence's last position "
                "(it cannot be rewound or moved; decode the tokens again from the start instead)");
}

Context::~Context() = default;

void Context::start_activation_stats(bool include_output) {
    if (offload_) throw Error("activation statistics need every layer on the CPU; load the model without offload");
    stats_ = std::make_unique<ActivationStats>(include_output);
    env_.activation_stats = stats_.get();
}

void Context::sync_offloaded_kv(int64_t n) const {
    if (offload_) offload_->sync_kv_to_host(std::min(n, n_past_));
}

// Spare logits buffers are kept only while they are small (a few decode steps' rows): a parallel
// generation holds the view of its last row until its next step, so without spares every step
// would allocate and zero rows x n_vocab floats (4 MB for 4 rows of Gemma 3's vocabulary), while
// a perplexity run's thousand-row buffers are better returned to the system.
constexpr size_t kMaxSpareLogitBuffers = 2;
constexpr int64_t kMaxSpareLogitRows = 16;

void Context::use_logits_buffer(size_t n_floats) {
    // Written only when nothing else holds it (use_count 1), so a view from Python never sees its
    // values change or its memory go away.
    auto usable = [n_floats](const std::shared_ptr<std::vector<float>>& b) {
        return b.use_count() == 1 && b->size() >= n_floats;
    };
    if (usable(logits_)) return;
    auto spare = std::find_if(spare_logits_.begin(), spare_logits_.end(), usable);
    std::shared_ptr<std::vector<float>> next;
    if (spare != spare_logits_.end()) {
        next = std::move(*spare);
        spare_logits_.erase(spare);
    } else {
        next = std::make_shared<std::vector<float>>(n_floats);
    }
    // The current buffer becomes a spare if a view holds it (it may be written again once that
    // view is gone) and it is small.
    if (logits_.use_count() > 1 && logits_->size() <= (size_t)(kMaxSpareLogitRows * n_vocab())) {
        if (spare_logits_.size() == kMaxSpareLogitBuffers) spare_logits_.erase(spare_logits_.begin());
        spare_logits_.push_back(std::move(logits_));
    }
    logits_ = std::move(next);
}

void Context::decode(const int32_t* tokens, int64_t n, int64_t first_logit, BatchOrder order, int seq) {
    check_seq(seq, "decode");
    if (n <= 0) throw Error("decode needs at least one token");
    if (first_logit < 0 || first_logit > n)
        throw Error("first logit row " + std::to_string(first_logit) + " is outside 0.." + std::to_string(n));
    int64_t& past = seq_past(seq);
    if (past + n > n_ctx())
        throw ContextOverflowError("context overflow: " + std::to_string(past) + " cached + " + std::to_string(n) +
                                   " new tokens exceed the context size of " + std::to_string(n_ctx()));
    const int64_t n_vocab = this->n_vocab();
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw Error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                        " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");

    const int64_t rows = n - first_logit;
    use_logits_buffer((size_t)(rows * n_vocab));

    // The forward reads the cache the environment points at: this sequence's, for this call
    // (back to sequence 0's afterwards, even when the forward throws).
    struct PointKv {
        ForwardEnv& env;
        KvCache* home;
        ~PointKv() { env.kv = home; }
    } point{env_, &kv_};
    env_.kv = &seq_kv(seq);
    for (int64_t done = 0; done < n;) {
        const int64_t chunk = std::min(n_batch_, n - done);
        // This chunk's rows from first_logit on (all of them, some, or none: chunk).
        const int64_t first = std::clamp<int64_t>(first_logit - done, 0, chunk);
        float* out = logits_->data() + std::max<int64_t>(0, done - first_logit) * n_vocab;
        model_->arch().forward(env_, ForwardBatch{tokens + done, chunk, past, first, out, order});
        past += chunk;
        done += chunk;
    }
    n_logit_rows_ = rows;
}

int64_t Context::n_past(int seq) const {
    check_seq(seq, "n_past");
    return seq_past(seq);
}

const KvCache& Context::kv(int seq) const {
    check_seq(seq, "kv");
    return seq_kv(seq);
}

void Context::truncate(int64_t n, int seq) {
    check_seq(seq, "truncate");
    int64_t& past = seq_past(seq);
    n = std::clamp<int64_t>(n, 0, past);
    // Position 0 starts afresh (the convolution ignores the state there); anything between is refused.
    if (n > 0) check_whole_sequence(n, seq, "truncate to");
    past = n;
}

void Context::shift(int64_t n_keep, int64_t n_discard, int seq) {
    check_seq(seq, "shift");
    int64_t& past = seq_past(seq);
    if (n_keep < 0 || n_discard <= 0 || n_keep + n_discard > past)
        throw Error("cannot shift: n_keep=" + std::to_string(n_keep) + ", n_discard=" + std::to_string(n_discard) +
                    " with " + std::to_string(past) + " cached positions");
    if (recurrent())
        throw Error("cannot shift the context: " + model_->hparams().arch +
                    "'s short-convolution layers keep a recurrent state that saw the dropped tokens and cannot "
                    "forget them (use context_overflow='stop', or a larger context)");
    const ArchModel& arch = model_->arch();
    const KernelTable& kt = env_.kt;
    KvCache& kv = seq_kv(seq);
    const int32_t delta = (int32_t)-n_discard;
    // Probe first, so an architecture without a shift throws before anything moves.
    if (n_keep + n_discard < past) {
        std::vector<float> probe((size_t)kv.width(), 0.0f);
        arch.rotate_cached_keys(kt, 0, probe.data(), 1, delta, kv.n_ctx());
    }
    // Offloaded layers (sequence 0 only) are shifted on the host copy of their rows, then sent back.
    if (seq == 0) sync_offloaded_kv(past);
    kv.shift(past, n_keep, n_discard,
             [&](int64_t layer, float* rows, int64_t m) { arch.rotate_cached_keys(kt, layer, rows, m, delta, kv.n_ctx()); });
    past -= n_discard;
    if (offload_ && seq == 0) offload_->sync_kv_to_device(past);
}

void Context::copy_kv_out(int64_t n, uint8_t* dst, int seq) const {
    check_seq(seq, "copy_kv_out");
    if (seq == 0) sync_offloaded_kv(n);
    if (n < 0 || n > seq_past(seq))
        throw Error("cannot copy " + std::to_string(n) + " KV positions: " + std::to_string(seq_past(seq)) +
                    " are cached");
    check_whole_sequence(n, seq, "copy");
    seq_kv(seq).copy_rows_out(n, dst);
}

void Context::restore_kv(int64_t n_stored, int64_t n_use, const uint8_t* src, size_t size, int seq) {
    check_seq(seq, "restore_kv");
    if (n_stored < 0 || n_use < 0 || n_use > n_stored || n_use > n_ctx())
        throw StateError("cannot restore " + std::to_string(n_use) + " of " + std::to_string(n_stored) +
                         " KV positions into a context of " + std::to_string(n_ctx()));
    KvCache& kv = seq_kv(seq);
    if (size != kv.rows_bytes(n_stored))
        throw StateError("a KV snapshot of " + std::to_string(n_stored) + " positions for this context has " +
                         std::to_string(kv.rows_bytes(n_stored)) + " bytes, not " + std::to_string(size));
    if (recurrent() && n_use != n_stored)
        throw StateError("cannot restore " + std::to_string(n_use) + " of " + std::to_string(n_stored) +
                         " positions: " + model_->hparams().arch +
                         "'s short-convolution layers keep a recurrent state that holds only the last position");
    kv.copy_rows_in(n_stored, n_use, src);
    if (offload_ && seq == 0) offload_->sync_kv_to_device(n_use);
    seq_past(seq) = n_use;
}

}  // namespace ei
