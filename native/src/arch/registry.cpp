// The architecture registry: general.architecture -> loader. Adding a family is one line here.
#include <string>
#include <utility>

#include "common/error.h"
#include "arch/arch.h"

namespace ei {

std::unique_ptr<ArchModel> load_llama(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_gemma3(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_qwen2(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_qwen3(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_qwen3moe(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_phi3(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_smollm3(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_granite(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_lfm2(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_gptoss(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_bert(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_nomic_bert(const GgufFile& file, const KernelTable& kt);
std::unique_ptr<ArchModel> load_gemma_embedding(const GgufFile& file, const KernelTable& kt);

namespace {
using Loader = std::unique_ptr<ArchModel> (*)(const GgufFile&, const KernelTable&);
const std::pair<const char*, Loader> kArchitectures[] = {
    {"llama", load_llama},
    {"gemma3", load_gemma3},
    {"qwen2", load_qwen2},
    {"qwen3", load_qwen3},
    {"qwen3moe", load_qwen3moe},
    {"phi3", load_phi3},
    {"smollm3", load_smollm3},
    {"granite", load_granite},
    {"lfm2", load_lfm2},
    {"lfm2moe", load_lfm2},
    {"gpt-oss", load_gptoss},
    {"bert", load_bert},  // an encoder (arch/bert.cpp)
    {"nomic-bert", load_nomic_bert},  // an encoder with RoPE and SwiGLU (arch/nomic_bert.cpp)
    {"gemma-embedding", load_gemma_embedding},  // Gemma 3 layers as an encoder (arch/gemma_embedding.cpp)
};
}  // namespace

std::unique_ptr<ArchModel> load_architecture(const GgufFile& file, const KernelTable& kt) {
    const std::string arch = file.get_string("general.architecture");
    for (const auto& [name, loader] : kArchitectures)
        if (arch == name) return loader(file, kt);
    std::string known;
    for (const auto& entry : kArchitectures) known += std::string(known.empty() ? "" : ", ") + entry.first;
    throw Error(file.path() + ": architecture '" + gguf_printable(arch) + "' is not supported (supported: " + known + ")");
}

std::vector<std::string> supported_architectures() {
    std::vector<std::string> names;
    for (const auto& entry : kArchitectures) names.push_back(entry.first);
    return names;
}

}  // namespace ei
