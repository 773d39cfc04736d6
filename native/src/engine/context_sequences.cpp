// The Context's sequences beyond the first: parallel requests decoded in one forward. Each
// sequence has its own KV cache (no masks: a run of a sequence's rows attends over its own
// cache), and every row is computed in its one-row order, so a sequence's tokens are the ones it
// would get decoded alone.
#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/context.h"

namespace ei {

void Context::check_seq(int seq, const char* what) const {
    if (seq < 0 || seq >= n_seq())
        throw Error(std::string(what) + ": sequence " + std::to_string(seq) + " is outside 0.." +
                    std::to_string(n_seq() - 1));
}

void Context::seq_copy(int src, int dst, int64_t n) {
    check_seq(src, "seq_copy");
    check_seq(dst, "seq_copy");
    if (n < 0 || n > seq_past(src))
        throw Error("seq_copy: sequence " + std::to_string(src) + " has " + std::to_string(seq_past(src)) +
                    " cached positions, not " + std::to_string(n));
    if (src == dst) return truncate(n, dst);
    if (n > 0) check_whole_sequence(n, src, "copy");  // the blob carries src's state
    std::vector<uint8_t> rows(seq_kv(src).rows_bytes(n));
    seq_kv(src).copy_rows_out(n, rows.data());
    seq_kv(dst).copy_rows_in(n, n, rows.data());
    seq_past(dst) = n;
}

void Context::decode_sequences(const int32_t* tokens, const int32_t* seq_ids, const uint8_t* want_logits,
                               int64_t n) {
    if (n <= 0) throw Error("decode needs at least one token");
    const int64_t n_vocab = this->n_vocab();
    std::vector<int64_t> count((size_t)n_seq(), 0);
    for (int64_t i = 0; i < n; ++i) {
        if (seq_ids[i] < 0 || seq_ids[i] >= n_seq())
            throw Error("sequence id " + std::to_string(seq_ids[i]) + " at index " + std::to_string(i) +
                        " is outside 0.." + std::to_string(n_seq() - 1));
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            throw Error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                        " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
        ++count[(size_t)seq_ids[i]];
    }
    for (int s = 0; s < n_seq(); ++s)
        if (count[(size_t)s] && seq_past(s) + count[(size_t)s] > n_ctx())
            throw ContextOverflowError("context overflow in sequence " + std::to_string(s) + ": " +
                                       std::to_string(seq_past(s)) + " cached + " + std::to_string(count[(size_t)s]) +
                                       " new tokens exceed its context size of " + std::to_string(n_ctx()));
    // The rows with logits: as asked, or each sequence's last row in the batch.
    std::vector<uint8_t> wanted((size_t)n, 0);
    if (want_logits) {
        std::copy(want_logits, want_logits + n, wanted.begin());
    } else {
        std::vector<int64_t> last((size_t)n_seq(), -1);
        for (int64_t i = 0; i < n; ++i) last[(size_t)seq_ids[i]] = i;
        for (int64_t i : last)
            if (i >= 0) wanted[(size_t)i] = 1;
    }
    const int64_t rows = std::count(wanted.begin(), wanted.end(), 1);
    use_logits_buffer((size_t)(rows * n_vocab));

    std::vector<SequenceRun> runs;
    std::vector<int64_t> logit_rows;
    std::vector<int64_t> next((size_t)n_seq());  // each sequence's next position
    for (int s = 0; s < n_seq(); ++s) next[(size_t)s] = seq_past(s);
    int64_t out_row = 0;
    for (int64_t done = 0; done < n;) {
        const int64_t chunk = std::min(n_batch_, n - done);
        runs.clear();
        logit_rows.clear();
        for (int64_t i = 0; i < chunk; ++i) {
            const int seq = seq_ids[done + i];
            if (runs.empty() || runs.back().kv != &seq_kv(seq)) runs.push_back({&seq_kv(seq), i, 0, next[(size_t)seq]});
            ++runs.back().n;
            ++next[(size_t)seq];
            if (wanted[(size_t)(done + i)]) logit_rows.push_back(i);
        }
        ForwardBatch b{tokens + done, chunk, 0, chunk, logits_->data() + out_row * n_vocab, BatchOrder::per_row};
        b.runs = runs.data();
        b.n_runs = runs.size();
        b.logit_rows = logit_rows.data();
        b.n_logit_rows = (int64_t)logit_rows.size();
        model_->arch().forward(env_, b);
        // Only the sequences in this batch are written: the owners of the others may read theirs meanwhile.
        for (int s = 0; s < n_seq(); ++s)
            if (count[(size_t)s]) seq_past(s) = next[(size_t)s];
        out_row += (int64_t)logit_rows.size();
        done += chunk;
    }
    n_logit_rows_ = rows;
}

}  // namespace ei
