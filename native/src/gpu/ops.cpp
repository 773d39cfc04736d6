// Host side of the device ops (see ops.h): argument checks, kernel arguments and work sizes.
// The work-group sizes are the kernels' reqd_work_group_size (kernels/*.cl).
#include "gpu/ops.h"

#include <cmath>

#include "common/error.h"
#include "cpu/kernels.h"
#include "gpu/kernel_sources.h"
#include "quant/types.h"

namespace ei::cl {

namespace {

constexpr size_t kMatmulWg = 64;    // MM_WG (matmul.cl)
constexpr int64_t kMatmulTile = 8;  // MM_TILE
constexpr size_t kNormWg = 64;      // NORM_WG (norm.cl)
constexpr size_t kAttnWg = 64;      // ATT_WG (attention.cl)
constexpr int64_t kAttnMaxHeadDim = 64 * 4;  // ATT_WG * ATT_DIMS_PER_ITEM (= HADAMARD_MAX_DIM)

// Which source files make up each program (the block prelude always comes first).
std::string source_of(const std::string& program) {
    if (program == "matmul_f32" || program == "matmul_f16") return program_source({"dequant.cl", "matmul.cl"});
    if (program.rfind("matmul_iq2", 0) == 0 || program.rfind("matmul_iq3", 0) == 0)  // the lattice grids
        return program_source({"iq_grids.cl", "vec_dot.cl", "vec_dot_iq23.cl", "matmul.cl"});
    if (program == "matmul_iq1_s" || program == "matmul_iq1_m")
        return program_source({"iq1_grids.cl", "vec_dot.cl", "vec_dot_iq1.cl", "matmul.cl"});
    if (program == "matmul_tq1_0" || program == "matmul_tq2_0")
        return program_source({"vec_dot.cl", "vec_dot_ternary.cl", "matmul.cl"});
    if (program.rfind("matmul_iq", 0) == 0 || program == "matmul_mxfp4")
        return program_source({"vec_dot.cl", "vec_dot_iquants.cl", "matmul.cl"});
    if (program.rfind("matmul_", 0) == 0) return program_source({"vec_dot.cl", "matmul.cl"});
    if (program == "quantize_act") return program_source({"quantize_act.cl"});
    if (program == "norm") return program_source({"norm.cl"});
    if (program == "rope") return program_source({"rope.cl"});
    if (program.rfind("attention_", 0) == 0) return program_source({"attention.cl"});
    if (program == "kv_store") return program_source({"quantize_act.cl", "kv_store.cl"});
    if (program == "kv_centered") return program_source({"kv_centered.cl"});
    if (program == "elementwise") return program_source({"elementwise.cl"});
    if (program == "moe") return program_source({"vec_dot.cl", "elementwise.cl", "moe.cl"});
    if (program == "shortconv") return program_source({"shortconv.cl"});
    throw Error("no OpenCL program named '" + program + "'");
}

void require(bool ok, const std::string& what) {
    if (!ok) throw Error(what);
}

void require_floats(const Buffer& b, int64_t count, const char* what) {
    require(b.bytes >= (size_t)count * sizeof(float),
            std::string("device buffer ") + what + " is smaller than " + std::to_string(count) + " floats");
}

void require_floats(const FloatsAt& b, int64_t count, const char* what) {
    require(b.first >= 0, std::string("device buffer ") + what + " addressed before its start");
    require_floats(*b.buf, b.first + count, what);
}

// A view as kernel arguments: the buffer, then the index of its first float.
void set_floats_at(Kernel& k, cl_uint index, const FloatsAt& b) {
    k.set_arg(index, *b.buf);
    k.set_arg(index + 1, (cl_ulong)b.first);
}

int to_int(int64_t v, const char* what) {
    require(v >= 0 && v <= INT32_MAX, std::string(what) + " does not fit the kernels' int range");
    return (int)v;
}

// 1 / sqrt(d), the last step of the Hadamard rotation, as kv/hadamard.cpp computes it.
float inv_sqrt(int64_t d) { return 1.0f / std::sqrt((float)d); }

// The float weight types multiply float activations; the others quantize them first.
bool is_quantized(uint32_t type) { return type != TYPE_F32 && type != TYPE_F16; }

// A weight of `type` with `matrices` x `rows` rows of `cols` values in w, as the matmuls take it.
void require_weights(uint32_t type, const Buffer& w, int64_t matrices, int64_t rows, int64_t cols) {
    require(matmul_supports(type), std::string("no OpenCL matmul for weight type ") +
                                       (type_known(type) ? type_info(type).name : "?"));
    require(cols % 32 == 0 && cols % type_info(type).block_size == 0,
            "OpenCL matmul: a row of " + std::to_string(cols) + " " + type_info(type).name +
                " values is not a whole number of 32-value chunks");
    require(w.bytes >= row_bytes(type, cols) * (size_t)(matrices * rows),
            "OpenCL matmul: the weight buffer is smaller than its rows");
}

void require_head(int64_t width, int64_t head_dim, bool rotated, const char* op) {
    require(head_dim > 0 && head_dim <= kAttnMaxHeadDim && width % head_dim == 0,
            std::string("OpenCL ") + op + ": rows of " + std::to_string(width) + " values are not heads of at most " +
                std::to_string(kAttnMaxHeadDim));
    require(!rotated || (head_dim & (head_dim - 1)) == 0,
            std::string("OpenCL ") + op + ": a rotated head needs head_dim to be a power of two");
}

}  // namespace

bool matmul_supports(uint32_t type) {
    switch (type) {
        case TYPE_F32: case TYPE_F16: case TYPE_Q4_0: case TYPE_Q4_1: case TYPE_Q5_0: case TYPE_Q8_0:
        case TYPE_Q4_K: case TYPE_Q6_K: case TYPE_IQ4_NL: case TYPE_IQ4_XS:
        case TYPE_IQ2_XXS: case TYPE_IQ2_XS: case TYPE_IQ2_S: case TYPE_IQ3_XXS: case TYPE_IQ3_S:
        case TYPE_IQ1_S: case TYPE_IQ1_M: case TYPE_TQ1_0: case TYPE_TQ2_0: case TYPE_MXFP4:
            return true;
        default:
            return false;
    }
}

bool quantize_supports(uint32_t type) { return type == TYPE_Q8_0 || type == TYPE_Q8_1 || type == TYPE_Q8_K; }

bool kv_supports(uint32_t type) { return type == TYPE_F16 || type == TYPE_Q8_0 || type == TYPE_Q4_0; }

std::string DeviceOps::with_exact_division(const std::string& options) const {
    // The kernels mirror the CPU's float arithmetic (quantizer scales, 1 / sqrt in rms_norm,
    // silu's division), which needs IEEE division and sqrt; OpenCL allows a few ulp unless this
    // is asked for, and only devices that report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT may be.
    if (!dev_.info().fp32_exact_divide) return options;
    return options.empty() ? "-cl-fp32-correctly-rounded-divide-sqrt" : options + " -cl-fp32-correctly-rounded-divide-sqrt";
}

Kernel& DeviceOps::kernel(const std::string& program, const char* name, const std::string& options) {
    const std::string key = program + "/" + name;
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    Kernel k = programs_.kernel(program, source_of(program), name, with_exact_division(options));
    return kernels_.emplace(key, std::move(k)).first->second;
}

Kernel& DeviceOps::matmul_kernel(uint32_t type, const char* name) {
    // One program per weight type, specialised by -DDEQUANT32 (float types) or -DVEC_DOT and
    // -DACT_BLOCK (quantized types); the cache key includes the options.
    const std::string tname = type_info(type).name;
    const std::string program = "matmul_" + tname;
    const bool quantized = is_quantized(type);
    const std::string key = program + "/" + name;
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    const std::string options =
        quantized ? "-DVEC_DOT=vec_dot_row_" + tname + " -DACT_BLOCK=block_" +
                        type_info(kernels().types[type].vec_dot_type).name
                  : "-DDEQUANT32=dequant32_" + tname;
    Kernel k = programs_.kernel(program, source_of(program), name, with_exact_division(options));
    return kernels_.emplace(key, std::move(k)).first->second;
}

const Buffer& DeviceOps::act_scratch(size_t bytes) {
    if (act_scratch_.bytes < bytes) {
        act_scratch_ = Buffer{};  // free the old one first: device memory may be tight
        act_scratch_ = dev_.alloc(bytes, "the quantized activations of a matmul");
    }
    return act_scratch_;
}

void DeviceOps::quantize(uint32_t type, const Buffer& x, int64_t n, int64_t cols, const Buffer& out) {
    require(quantize_supports(type), std::string("no OpenCL activation quantizer for type ") +
                                         (type_known(type) ? type_info(type).name : "?"));
    const int64_t block = type_info(type).block_size;
    require(cols % block == 0, "OpenCL quantize: a row of " + std::to_string(cols) + " values is not a whole number of " +
                                   type_info(type).name + " blocks");
    require_floats(x, n * cols, "x");
    require(out.bytes >= (size_t)n * row_bytes(type, cols), "OpenCL quantize: the output buffer is too small");
    // The quantizers divide (amax / 127, 1 / iscale): devices that cannot divide correctly
    // rounded (with_exact_division) may differ from the CPU in rare last bits.
    const std::string name = std::string("quantize_") + type_info(type).name;
    Kernel& k = kernel("quantize_act", name.c_str());
    k.set_args(x, out, to_int(cols, "cols"));
    const size_t global[2] = {(size_t)(cols / block), (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

const Buffer& DeviceOps::quantized_activations(uint32_t type, const Buffer& x, int64_t n, int64_t cols) {
    const uint32_t act_type = kernels().types[type].vec_dot_type;
    const Buffer& xq = act_scratch((size_t)n * ei::row_bytes(act_type, cols));
    quantize(act_type, x, n, cols, xq);
    return xq;
}

void DeviceOps::matmul(uint32_t type, const Buffer& w, int64_t rows, int64_t cols, const Buffer& x, int64_t n,
                       const Buffer& y) {
    require_weights(type, w, 1, rows, cols);
    const size_t row_bytes = ei::row_bytes(type, cols);
    require_floats(x, n * cols, "x");
    require_floats(y, n * rows, "y");
    const int icols = to_int(cols, "cols"), irows = to_int(rows, "rows"), in = to_int(n, "n");
    const cl_ulong rb = row_bytes;
    if (is_quantized(type)) {
        const Buffer& xq = quantized_activations(type, x, n, cols);
        const int nb = (int)(cols / type_info(type).block_size);
        Kernel& k = matmul_kernel(type, "matmul_q");
        k.set_args(w, rb, xq, y, nb, irows, in);
        const size_t global[2] = {(size_t)rows, (size_t)n};
        dev_.run(k, 2, global, nullptr);
        return;
    }
    if (n == 1) {
        Kernel& k = matmul_kernel(type, "matvec");
        k.set_args(w, rb, x, y, icols);
        const size_t global = (size_t)rows * kMatmulWg, local = kMatmulWg;
        dev_.run(k, 1, &global, &local);
    } else {
        Kernel& k = matmul_kernel(type, "matmat");
        k.set_args(w, rb, x, y, icols, irows, in);
        const size_t global[2] = {(size_t)rows * kMatmulWg, (size_t)((n + kMatmulTile - 1) / kMatmulTile)};
        const size_t local[2] = {kMatmulWg, 1};
        dev_.run(k, 2, global, local);
    }
}

void DeviceOps::matmul_id(uint32_t type, const Buffer& w, int64_t rows, int64_t cols, int64_t n_expert,
                          const Buffer& x, int64_t x_rows, const Buffer& ids, int64_t n_slots, const Buffer& y) {
    require_weights(type, w, n_expert, rows, cols);
    require(x_rows > 0 && n_slots % x_rows == 0, "OpenCL matmul_id: the slots are not whole groups of x's rows");
    require_floats(x, x_rows * cols, "x");
    require(ids.bytes >= (size_t)n_slots * sizeof(int32_t), "OpenCL matmul_id: fewer expert indices than slots");
    require_floats(y, n_slots * rows, "y");
    const cl_ulong rb = ei::row_bytes(type, cols), expert_bytes = rb * (cl_ulong)rows;
    const int irows = to_int(rows, "rows"), x_per = to_int(n_slots / x_rows, "slots per row");
    if (is_quantized(type)) {
        const Buffer& xq = quantized_activations(type, x, x_rows, cols);
        Kernel& k = matmul_kernel(type, "matmul_q_id");
        k.set_args(w, rb, expert_bytes, ids, xq, y, (int)(cols / type_info(type).block_size), irows, x_per);
        const size_t global[2] = {(size_t)rows, (size_t)n_slots};
        dev_.run(k, 2, global, nullptr);
        return;
    }
    Kernel& k = matmul_kernel(type, "matvec_id");
    k.set_args(w, rb, expert_bytes, ids, x, y, to_int(cols, "cols"), irows, x_per);
    const size_t global[2] = {(size_t)rows * kMatmulWg, (size_t)n_slots}, local[2] = {kMatmulWg, 1};
    dev_.run(k, 2, global, local);
}

void DeviceOps::rms_norm(FloatsAt x, const Buffer& w, const Buffer& out, int64_t n, int64_t d, float eps) {
    require_floats(x, n * d, "x");
    require_floats(w, d, "w");
    require_floats(out, n * d, "out");
    Kernel& k = kernel("norm", "rms_norm");
    set_floats_at(k, 0, x);
    k.set_arg(2, w);
    k.set_arg(3, out);
    k.set_arg(4, to_int(d, "d"));
    k.set_arg(5, eps);
    const size_t global = (size_t)n * kNormWg, local = kNormWg;
    dev_.run(k, 1, &global, &local);
}

void DeviceOps::rope(const Buffer& x, const Buffer& cs, int64_t n, const RopeShape& s) {
    require(s.n_rot % 2 == 0 && s.n_rot > 0 && s.n_rot <= s.head_dim, "OpenCL rope: n_rot must be even and <= head_dim");
    require_floats(x, n * s.n_heads * s.head_dim, "x");
    require_floats(cs, n * s.n_rot, "cs");
    Kernel& k = kernel("rope", "rope");
    k.set_args(x, cs, to_int(s.n_heads, "n_heads"), to_int(s.head_dim, "head_dim"), to_int(s.n_rot, "n_rot"),
               (int)s.neox);
    const size_t global[3] = {(size_t)(s.n_rot / 2), (size_t)s.n_heads, (size_t)n};
    dev_.run(k, 3, global, nullptr);
}

void DeviceOps::kv_store(uint32_t type, const Buffer& src, const Buffer& cache, int64_t pos0, int64_t n,
                         int64_t width) {
    require(kv_supports(type), std::string("no OpenCL KV cache of type ") + (type_known(type) ? type_info(type).name : "?"));
    require(width % type_info(type).block_size == 0, "OpenCL kv_store: a row is not a whole number of blocks");
    require_floats(src, n * width, "src");
    require(cache.bytes >= (size_t)(pos0 + n) * row_bytes(type, width), "OpenCL kv_store: positions past the cache's end");
    const std::string name = std::string("kv_store_") + type_info(type).name;
    Kernel& k = kernel("kv_store", name.c_str());
    k.set_args(src, cache, to_int(pos0, "pos0"), to_int(width, "width"));
    const size_t global[2] = {(size_t)(width / type_info(type).block_size), (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

void DeviceOps::kv_encode_k(const Buffer& src, const Buffer& dst, const Buffer& centering, int64_t row0, int64_t n,
                            int64_t width, int64_t head_dim, bool centered, bool rotated) {
    require_head(width, head_dim, rotated, "kv_encode_k");
    require_floats(src, (row0 + n) * width, "src");
    require_floats(dst, n * width, "dst");
    if (centered) require_floats(centering, 3 * width, "centering");
    Kernel& k = kernel("kv_centered", "kv_encode_k");
    k.set_args(src, dst, centered ? centering : src, to_int(row0, "row0"), to_int(width, "width"),
               to_int(head_dim, "head_dim"), (int)centered, (int)rotated, inv_sqrt(head_dim));
    const size_t global[2] = {(size_t)(width / head_dim), (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

void DeviceOps::kv_center_v(const Buffer& src, const Buffer& dst, const Buffer& centering, int64_t row0, int64_t n,
                            int64_t width) {
    require_floats(src, (row0 + n) * width, "src");
    require_floats(dst, n * width, "dst");
    require_floats(centering, 3 * width, "centering");
    Kernel& k = kernel("kv_centered", "kv_center_v");
    k.set_args(src, dst, centering, to_int(row0, "row0"), to_int(width, "width"));
    const size_t global[2] = {(size_t)width, (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

void DeviceOps::attention_query(FloatsAt q, const Buffer& qr, const Buffer& bias, const Buffer& centering,
                                int64_t n, const AttentionDims& a, bool centered, bool rotated) {
    const int64_t width = a.n_head_kv * a.head_dim;
    require(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "OpenCL attention_query: n_head must be a multiple of n_head_kv");
    require_head(width, a.head_dim, rotated, "attention_query");
    require_floats(q, n * a.n_head * a.head_dim, "q");
    require_floats(qr, n * a.n_head * a.head_dim, "qr");
    require_floats(bias, n * a.n_head, "bias");
    if (centered) require_floats(centering, 3 * width, "centering");
    Kernel& k = kernel("kv_centered", "attention_query");
    set_floats_at(k, 0, q);
    k.set_arg(2, qr);
    k.set_arg(3, bias);
    k.set_arg(4, centered ? centering : qr);
    k.set_arg(5, to_int(a.n_head, "n_head"));
    k.set_arg(6, to_int(a.n_head / a.n_head_kv, "group"));
    k.set_arg(7, to_int(a.head_dim, "head_dim"));
    k.set_arg(8, to_int(width, "width"));
    k.set_arg(9, (int)centered);
    k.set_arg(10, (int)rotated);
    k.set_arg(11, inv_sqrt(a.head_dim));
    k.set_arg(12, a.scale);
    const size_t global[2] = {(size_t)a.n_head, (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

void DeviceOps::attention(uint32_t type_k, uint32_t type_v, FloatsAt q, const Buffer& k, const Buffer& v,
                          const Buffer& out, int64_t n, int64_t pos0, const AttentionDims& a, const SinkRows* sink) {
    require(kv_supports(type_k) && kv_supports(type_v), "OpenCL attention: the KV cache types must be f16, q8_0 or q4_0");
    require(a.n_head_kv > 0 && a.n_head % a.n_head_kv == 0, "OpenCL attention: n_head must be a multiple of n_head_kv");
    require(a.head_dim > 0 && a.head_dim <= kAttnMaxHeadDim,
            "OpenCL attention: head_dim " + std::to_string(a.head_dim) + " is over the kernel's " +
                std::to_string(kAttnMaxHeadDim));
    require_floats(q, n * a.n_head * a.head_dim, "q");
    require_floats(out, n * a.n_head * a.head_dim, "out");
    const int64_t width = a.n_head_kv * a.head_dim;
    const size_t k_row = row_bytes(type_k, width), v_row = row_bytes(type_v, width);
    require(k.bytes >= (size_t)(pos0 + n) * k_row && v.bytes >= (size_t)(pos0 + n) * v_row,
            "OpenCL attention: the KV cache is shorter than pos0 + n");
    if (a.sinks) require_floats(*a.sinks, a.n_head, "sinks");
    // One program per (K type, V type): the element readers are chosen at build time. Every
    // kernel takes the same first arguments (attention.cl); the sinks, or out standing in for
    // them with the flag 0, come after the cache rows' sizes.
    const std::string tk = type_info(type_k).name, tv = type_info(type_v).name;
    const bool f16 = type_k == TYPE_F16 && type_v == TYPE_F16 && !sink;
    if (sink) require(type_k != TYPE_F16, "OpenCL attention: a centered K cache is quantized");
    // F16: the CPU's one-row kernel, bit for bit (exp through double where the device has
    // doubles, else the device's exp, which may differ in the last bit).
    Kernel& kern = f16    ? kernel("attention_f16_f16", "attention_f16", "-DK_AT=kv_at_f16 -DV_AT=kv_at_f16")
                   : sink ? kernel("attention_centered_" + tk + "_" + tv, "attention",
                                   "-DCENTERED -DK_AT=kv_at_" + tk + " -DV_AT=kv_at_" + tv)
                          : kernel("attention_" + tk + "_" + tv, "attention",
                                   "-DK_AT=kv_at_" + tk + " -DV_AT=kv_at_" + tv);
    set_floats_at(kern, 0, q);
    cl_uint arg = 2;
    for (const Buffer* b : {&k, &v, &out}) kern.set_arg(arg++, *b);
    kern.set_arg(arg++, to_int(a.n_head, "n_head"));
    kern.set_arg(arg++, to_int(a.n_head_kv, "n_head_kv"));
    kern.set_arg(arg++, to_int(a.head_dim, "head_dim"));
    kern.set_arg(arg++, to_int(pos0, "pos0"));
    kern.set_arg(arg++, to_int(a.window, "window"));
    kern.set_arg(arg++, a.scale);
    if (!f16) {
        kern.set_arg(arg++, (cl_ulong)k_row);
        kern.set_arg(arg++, (cl_ulong)v_row);
    }
    kern.set_arg(arg++, a.sinks ? *a.sinks : out);
    kern.set_arg(arg++, (int)(a.sinks != nullptr));
    kern.set_local(arg++, (size_t)a.head_dim * sizeof(float));  // q_local
    if (sink) {
        require_floats(sink->q_sink, n * a.n_head * a.head_dim, "q_sink");
        require_floats(sink->bias, n * a.n_head, "bias");
        require_floats(sink->centering, 3 * width, "centering");
        require(sink->n_sink > 0 && sink->sink_k.bytes >= (size_t)(sink->n_sink * width) * 2 &&
                    sink->sink_v.bytes >= (size_t)(sink->n_sink * width) * 2,
                "OpenCL attention: the sink rows are shorter than n_sink");
        set_floats_at(kern, arg, sink->q_sink);
        arg += 2;
        kern.set_arg(arg++, sink->bias);
        kern.set_arg(arg++, sink->sink_k);
        kern.set_arg(arg++, sink->sink_v);
        kern.set_arg(arg++, sink->centering);
        kern.set_arg(arg++, to_int(sink->n_sink, "n_sink"));
        kern.set_local(arg++, (size_t)a.head_dim * sizeof(float));  // q_sink_local
    }
    const size_t global[3] = {kAttnWg, (size_t)a.n_head, (size_t)n};
    const size_t local[3] = {kAttnWg, 1, 1};
    dev_.run(kern, 3, global, local);
}

void DeviceOps::glu(const char* name, const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n) {
    require_floats(gate, n, "gate");
    require_floats(up, n, "up");
    require_floats(out, n, "out");
    Kernel& k = kernel("elementwise", name);
    k.set_args(gate, up, out);
    const size_t global = (size_t)n;
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::swiglu(const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n) {
    glu("swiglu", gate, up, out, n);
}

void DeviceOps::geglu(const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n) {
    glu("geglu", gate, up, out, n);
}

void DeviceOps::swiglu_oai(const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n) {
    glu("swiglu_oai", gate, up, out, n);
}

void DeviceOps::scale(const Buffer& x, float s, int64_t n) {
    require_floats(x, n, "x");
    Kernel& k = kernel("elementwise", "scale");
    k.set_args(x, s);
    const size_t global = (size_t)n;
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::add(FloatsAt y, FloatsAt x, int64_t n) {
    require_floats(y, n, "y");
    require_floats(x, n, "x");
    Kernel& k = kernel("elementwise", "add");
    set_floats_at(k, 0, y);
    set_floats_at(k, 2, x);
    const size_t global = (size_t)n;
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::add_rows(const Buffer& y, const Buffer& b, int64_t n, int64_t width) {
    require_floats(y, n * width, "y");
    require_floats(b, width, "the bias");
    Kernel& k = kernel("elementwise", "add_rows");
    k.set_args(y, b, to_int(width, "the row width"));
    const size_t global = (size_t)(n * width);
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::add_rows_id(const Buffer& y, const Buffer& b, const Buffer& ids, int64_t n_slots, int64_t width,
                            int64_t n_expert) {
    require_floats(y, n_slots * width, "y");
    require_floats(b, n_expert * width, "the experts' biases");
    require(ids.bytes >= (size_t)n_slots * sizeof(int32_t), "add_rows_id: fewer expert indices than rows");
    Kernel& k = kernel("moe", "add_rows_id");
    k.set_args(y, b, ids, to_int(width, "the row width"));
    const size_t global = (size_t)(n_slots * width);
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::router_logits(const Buffer& w, const Buffer& x, int64_t n, int64_t cols, int64_t n_expert,
                              const Buffer& y) {
    require_floats(w, n_expert * cols, "the router");
    require_floats(x, n * cols, "x");
    require_floats(y, n * n_expert, "the router logits");
    Kernel& k = kernel("moe", "router_logits_f32");
    k.set_args(w, x, y, to_int(cols, "cols"), to_int(n_expert, "n_expert"));
    const size_t global[2] = {(size_t)n_expert, (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

void DeviceOps::moe_route(const Buffer& logits, const Buffer& selected, const Buffer& weights, int64_t n,
                          const RouteShape& r) {
    require(r.n_used > 0 && r.n_used <= r.n_expert, "moe_route: n_used must be 1..n_expert");
    require_floats(logits, n * r.n_expert, "the router logits");
    require(selected.bytes >= (size_t)(n * r.n_used) * sizeof(int32_t), "moe_route: the selection buffer is too small");
    require_floats(weights, n * r.n_used, "the expert weights");
    Kernel& k = kernel("moe", "moe_route");
    k.set_args(logits, selected, weights, to_int(r.n_expert, "n_expert"), to_int(r.n_used, "n_used"),
               (int)r.softmax_weight, (int)r.norm_weights);
    const size_t global = (size_t)n;
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::moe_weighted_sum(const Buffer& y, const Buffer& w, const Buffer& out, int64_t n, int64_t n_used,
                                 int64_t d) {
    require_floats(y, n * n_used * d, "the experts' outputs");
    require_floats(w, n * n_used, "the expert weights");
    require_floats(out, n * d, "out");
    Kernel& k = kernel("moe", "moe_weighted_sum");
    k.set_args(y, w, out, to_int(d, "d"), to_int(n_used, "n_used"));
    const size_t global[2] = {(size_t)d, (size_t)n};
    dev_.run(k, 2, global, nullptr);
}

void DeviceOps::take_columns(const Buffer& src, const Buffer& dst, int64_t n, int64_t stride, int64_t c0,
                             int64_t width) {
    require(c0 >= 0 && width > 0 && c0 + width <= stride, "take_columns: columns outside the rows");
    require_floats(src, n * stride, "src");
    require_floats(dst, n * width, "dst");
    Kernel& k = kernel("elementwise", "take_columns");
    k.set_args(src, dst, to_int(stride, "the row stride"), to_int(c0, "the first column"), to_int(width, "the width"));
    const size_t global = (size_t)(n * width);
    dev_.run(k, 1, &global, nullptr);
}

void DeviceOps::short_conv(const Buffer& bcx, const Buffer& taps, const Buffer& state, const Buffer& y, int64_t n,
                           int64_t d, int64_t l, bool fresh) {
    require(l >= 2, "short_conv: a convolution needs at least 2 taps");
    require_floats(bcx, n * 3 * d, "bcx");
    require_floats(taps, d * l, "the taps");
    require_floats(state, d * (l - 1), "the state");
    require_floats(y, n * d, "y");
    Kernel& k = kernel("shortconv", "short_conv");
    k.set_args(bcx, taps, state, y, to_int(n, "n"), to_int(d, "d"), to_int(l, "l"), (int)fresh);
    const size_t global = (size_t)d;
    dev_.run(k, 1, &global, nullptr);
}

}  // namespace ei::cl
