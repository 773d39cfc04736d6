#include "arch/hparams.h"

#include <string>

namespace ei {

namespace {
int64_t positive(const GgufFile& f, const std::string& key, int64_t v, int64_t limit) {
    if (v <= 0 || v > limit) f.fail(key, "value " + std::to_string(v) + " is out of range (1.." + std::to_string(limit) + ")");
    return v;
}
}  // namespace

HParams read_hparams(const GgufFile& f) {
    HParams hp;
    hp.arch = f.get_string("general.architecture");
    const std::string a = hp.arch + ".";
    // Limits are generous sanity bounds: they only stop absurd values from sizing buffers.
    hp.n_ctx_train = positive(f, a + "context_length", f.get_int(a + "context_length", 4096), 1 << 24);
    hp.n_embd = positive(f, a + "embedding_length", f.get_int(a + "embedding_length"), 1 << 17);
    hp.n_layer = positive(f, a + "block_count", f.get_int(a + "block_count"), 4096);
    hp.n_head = positive(f, a + "attention.head_count", f.get_int(a + "attention.head_count"), 4096);
    hp.n_head_kv = positive(f, a + "attention.head_count_kv",
                            f.get_int(a + "attention.head_count_kv", hp.n_head), hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0)
        f.fail(a + "attention.head_count_kv", "head_count " + std::to_string(hp.n_head) +
                                                  " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    const int64_t default_head_dim = hp.n_embd % hp.n_head == 0 ? hp.n_embd / hp.n_head : 0;
    hp.head_dim = positive(f, a + "attention.key_length", f.get_int(a + "attention.key_length", default_head_dim), 1 << 12);
    if (f.get_int(a + "attention.value_length", hp.head_dim) != hp.head_dim)
        f.fail(a + "attention.value_length", "differs from key_length, which no supported architecture does");
    hp.n_ff = positive(f, a + "feed_forward_length", f.get_int(a + "feed_forward_length"), 1 << 20);
    hp.norm_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
    if (!(hp.norm_eps >= 0.0f && hp.norm_eps < 1.0f)) f.fail(a + "attention.layer_norm_rms_epsilon", "must be in [0, 1)");
    hp.n_rot = f.get_int(a + "rope.dimension_count", hp.head_dim);
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
        f.fail(a + "rope.dimension_count", "must be even and in 1.." + std::to_string(hp.head_dim));
    hp.rope_freq_base = (float)f.get_float(a + "rope.freq_base", 10000.0);
    if (!(hp.rope_freq_base > 0.0f)) f.fail(a + "rope.freq_base", "must be positive");
    // Absent from older files (llama.cpp's and ours), whose local layers ran at the default.
    hp.rope_freq_base_swa = (float)f.get_float(a + "rope.freq_base_swa", hp.rope_freq_base_swa);
    if (!(hp.rope_freq_base_swa > 0.0f)) f.fail(a + "rope.freq_base_swa", "must be positive");
    const std::string scaling = f.get_string(a + "rope.scaling.type", "none");
    const double factor = f.get_float(a + "rope.scaling.factor", 0.0);
    if (scaling == "linear" && factor > 0.0) hp.rope_freq_scale = (float)(1.0 / factor);
    else if (scaling != "none" && scaling != "linear" && factor > 1.0)
        f.fail(a + "rope.scaling.type", "rope scaling '" + gguf_printable(scaling) + "' is not supported yet");
    return hp;
}

}  // namespace ei
