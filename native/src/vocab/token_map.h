// Token text -> id, built once per vocabulary. An open-addressing table of ids (the texts stay
// in the vocabulary's own vector) instead of std::unordered_map, whose 262k node allocations made
// Gemma 3's vocabulary slow to index (docs/PERFORMANCE.md). Internal to vocab/.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ei {

class TokenMap {
public:
    // Indexes `texts` (id = position), which must outlive the map and never change. Returns
    // {-1, -1}, or the ids of the first duplicate text found {earlier id, later id}.
    std::pair<int32_t, int32_t> build(const std::vector<std::string>& texts);

    // The id of `text`, -1 if it is no token.
    int32_t find(std::string_view text) const {
        if (slots_.empty()) return -1;
        const uint32_t h = hash(text);
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.id < 0) return -1;
            if (s.hash == h && (*texts_)[size_t(s.id)] == text) return s.id;
        }
    }
    bool contains(std::string_view text) const { return find(text) >= 0; }

private:
    struct Slot {
        uint32_t hash;
        int32_t id;  // -1: empty
    };
    static uint32_t hash(std::string_view s) {  // FNV-1a: token texts are short
        uint32_t h = 2166136261u;
        for (unsigned char c : s) h = (h ^ c) * 16777619u;
        return h;
    }

    const std::vector<std::string>* texts_ = nullptr;
    std::vector<Slot> slots_;  // [power of two >= 2 * n_tokens]
    size_t mask_ = 0;
};

inline std::pair<int32_t, int32_t> TokenMap::build(const std::vector<std::string>& texts) {
    texts_ = &texts;
    size_t cap = 16;
    while (cap < 2 * texts.size()) cap *= 2;
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
    for (size_t id = 0; id < texts.size(); ++id) {
        const uint32_t h = hash(texts[id]);
        size_t i = h & mask_;
        for (; slots_[i].id >= 0; i = (i + 1) & mask_)
            if (slots_[i].hash == h && texts[size_t(slots_[i].id)] == texts[id]) return {slots_[i].id, int32_t(id)};
        slots_[i] = {h, int32_t(id)};
    }
    return {-1, -1};
}

}  // namespace ei
