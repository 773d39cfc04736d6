// The OpenCL C sources compiled into the core (native/src/gpu/kernels/*.cl, embedded at build
// time by embed_kernels.py) and the block-layout prelude generated from quant/blocks.h.
#pragma once
#include <string>

namespace ei::cl {

// #defines and typedefs of every quantized block struct, as OpenCL C.
const std::string& block_prelude();

// The text of kernels/<file> (e.g. "matmul.cl"); ei::Error if the build has no such file.
const std::string& kernel_file(const std::string& file);

// A program's full source: the block prelude, then each file in order.
std::string program_source(std::initializer_list<const char*> files);

}  // namespace ei::cl
