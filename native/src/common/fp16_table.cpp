#include "common/fp16_table.h"

#include "common/fp16.h"

namespace ei {

float g_fp16_to_fp32[1 << 16];

namespace {
// Fills the table when the module is loaded: a static constructor, so the lookup needs no
// "initialized yet?" check in the hot loops.
struct Fp16TableInit {
    Fp16TableInit() {
        for (uint32_t h = 0; h < (1u << 16); ++h) g_fp16_to_fp32[h] = fp16_to_fp32((uint16_t)h);
    }
} fill_at_load;
}  // namespace

}  // namespace ei
