// EI_KERNEL_FUNCTION marks a packed kernel's loop over one group (a tile of one panel width, a
// GEMV half) to be compiled as a function of its own. Without it GCC inlines every width's tile
// into the dispatcher that picks one, and the register allocation of that one large function
// spilled inside the hot loops of some widths: the packed Q4_K GEMM ran 1.45x faster at four
// columns once its tiles were kept apart, the llama.cpp-order Q4_1 and Q8_0 decode 1.6x
// (docs/PERFORMANCE.md, "Measurements behind code choices"). A call per group and panel costs
// nothing beside a group's work. (The AVX-512 own-order tile stays inline: apart, its prompts
// with many panels ran 0.89x.)
#pragma once

#define EI_KERNEL_FUNCTION __attribute__((noinline))
