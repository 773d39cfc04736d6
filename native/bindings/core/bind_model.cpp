// _core.Model and _core.Context: loading, and the one-call-per-step decode with zero-copy logits.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>

#include "common/error.h"
#include "cpu/kernels.h"
#include "engine/context.h"
#include "engine/state_file.h"
#include "kv/centered_k.h"
#include "model/model.h"

namespace py = pybind11;
using ei::Context;
using ei::Model;

namespace {

std::shared_ptr<Model> load_model(const std::string& path, std::optional<bool> exact) {
    const ei::FloatOrder order = !exact ? ei::default_float_order()
                                        : *exact ? ei::FloatOrder::llama_cpp : ei::FloatOrder::fast;
    py::gil_scoped_release release;
    return std::make_shared<Model>(path, order);
}

// One sequence of a Context (Context.sequence(i)): the single-sequence API on its cache. The
// Context object itself offers the same API on sequence 0.
struct SequenceRef {
    Context* ctx;
    int seq;
};
Context& context_of(Context& c) { return c; }
Context& context_of(SequenceRef& r) { return *r.ctx; }
int seq_of(const Context&) { return 0; }
int seq_of(const SequenceRef& r) { return r.seq; }

void decode(Context& ctx, int seq, py::array_t<int32_t, py::array::c_style | py::array::forcecast> tokens,
            bool all_logits, const py::object& logits_from, bool as_single_steps) {
    if (tokens.ndim() != 1) throw ei::Error("tokens must be a 1-D sequence of ids");
    const int32_t* data = tokens.data();
    const int64_t n = tokens.shape(0);
    int64_t first = all_logits ? 0 : n - 1;
    if (!logits_from.is_none()) {
        if (all_logits) throw ei::Error("give all_logits or logits_from, not both");
        first = logits_from.cast<int64_t>();
    }
    py::gil_scoped_release release;
    ctx.decode(data, n, first, as_single_steps ? ei::BatchOrder::per_row : ei::BatchOrder::llama_cpp, seq);
}

void decode_sequences(Context& ctx, py::array_t<int32_t, py::array::c_style | py::array::forcecast> tokens,
                      py::array_t<int32_t, py::array::c_style | py::array::forcecast> seq_ids, const py::object& logits) {
    if (tokens.ndim() != 1 || seq_ids.ndim() != 1 || tokens.shape(0) != seq_ids.shape(0))
        throw ei::Error("tokens and seq_ids must be 1-D sequences of the same length");
    std::vector<uint8_t> want;
    if (!logits.is_none()) {
        auto flags = logits.cast<py::array_t<bool, py::array::c_style | py::array::forcecast>>();
        if (flags.ndim() != 1 || flags.shape(0) != tokens.shape(0))
            throw ei::Error("logits must be one flag per token");
        want.assign(flags.data(), flags.data() + flags.shape(0));
    }
    const int32_t* t = tokens.data();
    const int32_t* s = seq_ids.data();
    const int64_t n = tokens.shape(0);
    py::gil_scoped_release release;
    ctx.decode_sequences(t, s, want.empty() ? nullptr : want.data(), n);
}

// The embeddings of several inputs in one call (GIL released throughout; Context::embed packs an
// encoder's inputs into shared passes, each input's floats as it gets alone), pooled; a list of
// float32 arrays, [n][n_embd] for pooling none, else 1-D.
py::list embed(Context& ctx, const py::list& inputs, const std::string& pooling_name) {
    const ei::Pooling pooling = ei::pooling_from_name(pooling_name);
    const ei::Model& model = ctx.model();
    const int64_t d = model.hparams().n_embd, d_out = model.n_embd_out();
    std::vector<std::vector<int32_t>> ids;
    for (const py::handle& item : inputs) {
        auto a = py::cast<py::array_t<int32_t, py::array::c_style | py::array::forcecast>>(item);
        if (a.ndim() != 1) throw ei::Error("each input must be a 1-D sequence of token ids");
        ids.emplace_back(a.data(), a.data() + a.shape(0));
    }
    std::vector<std::vector<float>> outs(ids.size());
    std::vector<const int32_t*> tokens(ids.size());
    std::vector<int64_t> lens(ids.size());
    std::vector<float*> out_ptrs(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        lens[i] = (int64_t)ids[i].size();
        outs[i].resize((size_t)std::max<int64_t>(1, ei::pooled_size(pooling, model.classifier(), model.projection(), lens[i], d)));
        tokens[i] = ids[i].data();
        out_ptrs[i] = outs[i].data();
    }
    {
        py::gil_scoped_release release;
        ctx.embed(tokens.data(), lens.data(), (int64_t)ids.size(), pooling, out_ptrs.data());
    }
    py::list result;
    for (size_t i = 0; i < ids.size(); ++i) {
        const py::ssize_t n = (py::ssize_t)ids[i].size();
        py::array_t<float> a = pooling == ei::Pooling::none ? py::array_t<float>({n, (py::ssize_t)d_out})
                                                            : py::array_t<float>((py::ssize_t)outs[i].size());
        std::copy(outs[i].begin(), outs[i].end(), a.mutable_data());
        result.append(a);
    }
    return result;
}

// [rows][n_vocab] float32 view of the context's logits; the array owns a reference to the buffer.
py::array logits_view(const Context& ctx) {
    auto* keep = new std::shared_ptr<std::vector<float>>(ctx.logits_buffer());
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<std::vector<float>>*>(p); });
    const py::ssize_t rows = ctx.n_logit_rows(), cols = ctx.n_vocab();
    py::array_t<float> view({rows, cols}, {cols * (py::ssize_t)sizeof(float), (py::ssize_t)sizeof(float)},
                            (*keep)->data(), owner);
    py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return view;
}

void save_state(const Context& ctx, int seq, const std::string& path,
                py::array_t<int32_t, py::array::c_style | py::array::forcecast> tokens) {
    if (tokens.ndim() != 1) throw ei::Error("tokens must be a 1-D sequence of ids");
    const int32_t* data = tokens.data();
    const int64_t n = tokens.shape(0);
    py::gil_scoped_release release;
    ei::save_state(ctx, path, data, n, seq);
}

py::list load_state(Context& ctx, int seq, const std::string& path) {
    std::vector<int32_t> tokens;
    {
        py::gil_scoped_release release;
        tokens = ei::load_state(ctx, path, seq);
    }
    py::list out(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) out[i] = tokens[i];
    return out;
}

// A copy of the KV rows of positions [0, n) as a 1-D uint8 array (the snapshot owns its memory:
// the live cache keeps changing).
py::array_t<uint8_t> kv_snapshot(const Context& ctx, int seq, int64_t n) {
    if (n < 0 || n > ctx.n_past(seq))
        throw ei::Error("cannot snapshot " + std::to_string(n) + " positions: " + std::to_string(ctx.n_past(seq)) +
                        " are cached");
    py::array_t<uint8_t> out((py::ssize_t)ctx.kv_rows_bytes(n));
    uint8_t* dst = out.mutable_data();
    py::gil_scoped_release release;
    ctx.copy_kv_out(n, dst, seq);
    return out;
}

void kv_restore(Context& ctx, int seq, py::array_t<uint8_t, py::array::c_style> blob, int64_t n_stored,
                int64_t n_use) {
    if (blob.ndim() != 1) throw ei::StateError("a KV snapshot is a 1-D uint8 array");
    const uint8_t* src = blob.data();
    const size_t size = (size_t)blob.shape(0);
    py::gil_scoped_release release;
    ctx.restore_kv(n_stored, n_use, src, size, seq);
}

// What start_activation_stats collected: (weight name, sum of squares, sum, rows) per matmul
// weight, in name order (the file's tensor names: what llama-imatrix's files are keyed by); for a
// stack of matrices (MoE experts) the sums are [n_mat][cols] and rows a count per matrix.
py::list activation_stats(const Context& ctx) {
    py::list out;
    const ei::ActivationStats* stats = ctx.activation_stats();
    if (!stats) return out;
    std::map<std::string, const ei::ActivationStats::Entry*> by_name;
    for (const ei::GgufTensor& t : ctx.model().file()->tensors()) {
        auto it = stats->entries().find(t.data);
        if (it != stats->entries().end()) by_name[t.name] = &it->second;
    }
    for (const auto& [name, e] : by_name) {
        const py::ssize_t n_mat = (py::ssize_t)e->counts.size(), cols = (py::ssize_t)e->sum2.size() / n_mat;
        const std::vector<py::ssize_t> shape = n_mat > 1 ? std::vector<py::ssize_t>{n_mat, cols}
                                                         : std::vector<py::ssize_t>{cols};
        py::array_t<float> sum2(shape), sum(shape);
        std::copy(e->sum2.begin(), e->sum2.end(), sum2.mutable_data());
        std::copy(e->sum.begin(), e->sum.end(), sum.mutable_data());
        if (n_mat > 1) {
            py::array_t<int64_t> counts(n_mat);
            std::copy(e->counts.begin(), e->counts.end(), counts.mutable_data());
            out.append(py::make_tuple(name, sum2, sum, counts));
        } else {
            out.append(py::make_tuple(name, sum2, sum, e->rows));
        }
    }
    return out;
}

// The single-sequence API, defined once for Context (sequence 0) and for SequenceRef.
template <class T>
void def_sequence_api(py::class_<T>& cls) {
    using Tokens = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;
    cls.def("decode",
            [](T& self, Tokens tokens, bool all_logits, const py::object& logits_from, bool as_single_steps) {
                decode(context_of(self), seq_of(self), tokens, all_logits, logits_from, as_single_steps);
            },
            py::arg("tokens"), py::arg("all_logits") = false, py::arg("logits_from") = py::none(),
            py::arg("as_single_steps") = false,
            "Run tokens after the cached ones (one native call; the GIL is released). Logits are "
            "kept for the last token, for every token (all_logits), or for tokens[logits_from:] "
            "(len(tokens): none). as_single_steps: every token's logits and cache rows exactly as "
            "decoding the tokens one call at a time gives them (a decode batch: drafted tokens, "
            "several sequences); else llama.cpp's order for a batch of this size (a prompt).")
        .def_property_readonly("logits", [](T& self) { return logits_view(context_of(self)); },
                               "Logits of the context's last decode (whichever sequence it was for), "
                               "[rows, n_vocab] float32, a read-only zero-copy view.")
        .def_property_readonly("n_past", [](T& self) { return context_of(self).n_past(seq_of(self)); })
        .def_property_readonly("n_ctx", [](T& self) { return context_of(self).n_ctx(); })
        .def_property_readonly("n_batch", [](T& self) { return context_of(self).n_batch(); })
        .def_property_readonly("recurrent", [](T& self) { return context_of(self).recurrent(); },
                               "Whether the model keeps a recurrent state per sequence (LFM2's convolutions): "
                               "then only a sequence's end can be truncated to (or 0), snapshotted or saved, "
                               "and it cannot be shifted.")
        .def("truncate", [](T& self, int64_t n) { context_of(self).truncate(n, seq_of(self)); }, py::arg("n"),
             "Forget cached positions >= n.")
        .def("shift",
             [](T& self, int64_t n_keep, int64_t n_discard) {
                 py::gil_scoped_release release;
                 context_of(self).shift(n_keep, n_discard, seq_of(self));
             },
             py::arg("n_keep"), py::arg("n_discard"),
             "Drop positions [n_keep, n_keep + n_discard), move the rest down and re-rotate their keys.")
        .def("kv_bytes_for", [](T& self, int64_t n) { return context_of(self).kv_rows_bytes(n); }, py::arg("n"),
             "Bytes of a KV snapshot of n positions.")
        .def("kv_snapshot", [](T& self, int64_t n) { return kv_snapshot(context_of(self), seq_of(self), n); },
             py::arg("n"), "A copy of the KV rows of positions [0, n) as a uint8 array (for kv_restore).")
        .def("kv_restore",
             [](T& self, py::array_t<uint8_t, py::array::c_style> blob, int64_t n_stored, int64_t n_use) {
                 kv_restore(context_of(self), seq_of(self), blob, n_stored, n_use);
             },
             py::arg("blob"), py::arg("n_stored"), py::arg("n_use"),
             "Restore positions [0, n_use) from a kv_snapshot(n_stored) blob (of any sequence of this "
             "context); n_past becomes n_use.")
        .def("save_state",
             [](T& self, const std::string& path, Tokens tokens) {
                 save_state(context_of(self), seq_of(self), path, tokens);
             },
             py::arg("path"), py::arg("tokens"), "Write tokens and the KV rows of their positions to `path` (atomically).")
        .def("load_state",
             [](T& self, const std::string& path) { return load_state(context_of(self), seq_of(self), path); },
             py::arg("path"),
             "Restore a saved state (StateFileError, nothing changed, if it does not fit); returns its tokens.");
}

}  // namespace

void register_model(py::module_& m) {
    // F16 positions at the start of a centered cache (kv/centered_k.h), for memory estimates.
    m.attr("kv_sink_rows") = ei::kSinkRows;
    py::class_<Model, std::shared_ptr<Model>>(m, "Model", "A loaded GGUF model (weights used in place from the mapping).")
        .def(py::init(&load_model), py::arg("path"), py::arg("exact") = py::none(),
             "exact=True: llama.cpp's float order in every matmul (its logits, bit for bit); False: the "
             "fast order where a type has one; None: EDGEINFER_EXACT=1 chooses exact.")
        .def_property_readonly("float_order", [](const Model& self) { return ei::float_order_name(self.kernels().order); })
        .def_property_readonly("gguf", [](const Model& self) { return self.file(); })
        .def_property_readonly("vocab", [](const Model& self) { return &self.vocab(); },
                               py::return_value_policy::reference_internal)
        .def_property_readonly("arch", [](const Model& self) { return self.hparams().arch; })
        .def_property_readonly("n_vocab", [](const Model& self) { return self.hparams().n_vocab; })
        .def_property_readonly("n_ctx_train", [](const Model& self) { return self.hparams().n_ctx_train; })
        .def_property_readonly("n_embd", [](const Model& self) { return self.hparams().n_embd; })
        .def_property_readonly("n_layer", [](const Model& self) { return self.hparams().n_layer; })
        .def_property_readonly("n_head", [](const Model& self) { return self.hparams().n_head; })
        .def_property_readonly("n_head_kv", [](const Model& self) { return self.hparams().n_head_kv; })
        .def_property_readonly("head_dim", [](const Model& self) { return self.hparams().head_dim; })
        .def_property_readonly("n_params", &Model::n_params)
        .def_property_readonly("pooling", [](const Model& self) { return ei::pooling_name(self.pooling()); },
                               "The file's pooling (<arch>.pooling_type): none, mean, cls, last or rank.")
        .def_property_readonly("is_encoder", [](const Model& self) { return self.arch().is_encoder(); })
        .def_property_readonly("n_embd_out", &Model::n_embd_out,
                               "Floats of an embedding: n_embd, or the Dense projections' output (EmbeddingGemma).")
        .def_property_readonly("n_cls_out", [](const Model& self) { return self.classifier().present() ? self.classifier().n_out() : 0; },
                               "Outputs of the classification head (0: none).")
        .def_property_readonly("fingerprint", &ei::model_fingerprint,
                               "64-bit hash of the GGUF header, metadata and tensor table (and file size).")
        .def_property_readonly("load_ms", &Model::load_ms);

    py::class_<Context> context(m, "Context", "Decoding state over a Model: KV cache, thread pool, logits.");
    context
        .def(py::init([](std::shared_ptr<Model> model, int64_t n_ctx, int n_threads, int64_t n_batch,
                         const std::string& type_k, const std::string& type_v, std::optional<bool> rotate_k,
                         std::optional<bool> center_k, const std::vector<int>& gpu_layers, int gpu_device,
                         const std::string& opencl_library, const std::string& opencl_cache_dir, int n_seq) {
                 const uint32_t tk = ei::kv_type_from_name(type_k), tv = ei::kv_type_from_name(type_v);
                 const bool rk = rotate_k.value_or(ei::kv_rotate_k_by_default(tk));
                 const bool ck = center_k.value_or(ei::kv_center_k_by_default(tk));
                 const ei::cl::OffloadRequest offload{gpu_layers, gpu_device, opencl_library, opencl_cache_dir};
                 py::gil_scoped_release release;
                 return new Context(std::move(model), n_ctx, n_threads, n_batch, tk, tv, rk, ck, offload, n_seq);
             }),
             py::arg("model"), py::arg("n_ctx") = 2048, py::arg("n_threads") = 0, py::arg("n_batch") = 512,
             py::arg("type_k") = "f16", py::arg("type_v") = "f16", py::arg("rotate_k") = py::none(),
             py::arg("center_k") = py::none(), py::arg("gpu_layers") = std::vector<int>{}, py::arg("gpu_device") = 0,
             py::arg("opencl_library") = "", py::arg("opencl_cache_dir") = "", py::arg("n_seq") = 1,
             py::keep_alive<1, 2>(),
             "rotate_k: store K head vectors Hadamard-rotated (None: where it pays, a q4_0 K). center_k: store "
             "a quantized K centered on the mean of the first keys, kept in F16 (None: where it pays, a q4_0 K).\n"
             "gpu_layers: layers to run on OpenCL device gpu_device (edgeinfer.gpu.placement plans them; F16 KV only).\n"
             "n_seq: sequences held (parallel requests), each with its own cache of n_ctx positions; the\n"
             "single-sequence methods work on sequence 0.")
        .def("decode_sequences", &decode_sequences, py::arg("tokens"), py::arg("seq_ids"), py::arg("logits") = py::none(),
             "One forward over tokens of several sequences: tokens[i] follows sequence seq_ids[i]'s cached "
             "positions and its earlier tokens here. Logits for the tokens flagged in `logits` (None: each "
             "sequence's last token), in token order. Each token is computed exactly as decoding it alone "
             "would (as_single_steps). Checked first: on an error nothing changed.")
        .def("embed", &embed, py::arg("inputs"), py::arg("pooling"),
             "Embeddings of a list of token-id sequences, each run alone from an empty sequence 0 (its cache "
             "is left empty), pooled: none ([n, n_embd_out]), mean, cls, last ([n_embd_out]) or rank ([n_cls_out]).")
        .def_property_readonly("n_seq", &Context::n_seq)
        .def("start_activation_stats", &Context::start_activation_stats, py::arg("include_output") = false,
             "Sum every matmul's input from now on (what `edgeinfer imatrix` collects), restarting from zero; "
             "include_output: the output head's input too. Refused with offloaded layers.")
        .def("stop_activation_stats", &Context::stop_activation_stats)
        .def("activation_stats", &activation_stats,
             "[(weight name, sum of x^2 per input column, sum of x, rows)] collected since start_activation_stats; "
             "for a stack of matrices (MoE experts) the sums are [n_mat, cols] and rows a count per matrix.")
        .def("sequence",
             [](Context& self, int seq) {
                 if (seq < 0 || seq >= self.n_seq())
                     throw ei::Error("sequence " + std::to_string(seq) + " is outside 0.." +
                                     std::to_string(self.n_seq() - 1));
                 return SequenceRef{&self, seq};
             },
             py::arg("seq"), py::keep_alive<0, 1>(),
             "Sequence seq as an object with the single-sequence API (decode, logits, n_past, truncate, "
             "shift, kv_snapshot, kv_restore, save_state, load_state) on its own cache.")
        .def("seq_copy", &Context::seq_copy, py::arg("src"), py::arg("dst"), py::arg("n"),
             "Sequence dst becomes a copy of the first n positions of sequence src (a shared prefix).")
        .def_property_readonly("n_threads", &Context::n_threads)
        .def_property_readonly("kv_bytes", &Context::kv_bytes)
        .def_property_readonly("type_k", [](const Context& c) { return ei::kv_type_name(c.kv().type_k()); })
        .def_property_readonly("type_v", [](const Context& c) { return ei::kv_type_name(c.kv().type_v()); })
        .def_property_readonly("rotate_k", [](const Context& c) { return c.kv().k_rotated(); })
        .def_property_readonly("center_k", [](const Context& c) { return c.kv().k_centered(); })
        .def_property_readonly("kv_bytes_per_token", [](const Context& c) { return c.kv().bytes_per_token(); });
    def_sequence_api(context);

    py::class_<SequenceRef> sequence(m, "Sequence", "One sequence of a Context (Context.sequence(i)).");
    sequence.def_property_readonly("seq", [](const SequenceRef& r) { return r.seq; });
    def_sequence_api(sequence);

    m.def("physical_cores", &ei::physical_core_count);
    m.def("supported_architectures", &ei::supported_architectures,
          "Values of general.architecture this build can run.");
    m.def("check_model",
          [](const std::string& path) {
              py::gil_scoped_release release;
              ei::check_model_file(path);
          },
          py::arg("path"),
          "Raises what Model(path) would, without repacking the weights (edgeinfer info).");
}
