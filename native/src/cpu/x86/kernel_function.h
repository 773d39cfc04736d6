// EI_KERNEL_FUNCTION marks a packed kernel's loop over one group (a tile of one panel width, a
// GEMV half) to be compiled as a function of its own. Without it GCC inlines every width's tile
// into the dispatcher that picks one, and the register allocation of that one large function
// spilled inside the hot loops of some widths, which an edit elsewhere in the file could tip
// either way (docs/PERFORMANCE.md, "Measurements behind code choices", has the figures). A call
// per group and panel costs nothing beside a group's work. The AVX-512 own-order tile stays
// inline: kept apart, its prompts (many panels) ran slower.
#pragma once

#define EI_KERNEL_FUNCTION __attribute__((noinline))
