"""Which of our kernel sets mirrors the llama.cpp build the fixtures were measured with.

The llama.cpp figures in ../shared/fixtures (REFERENCE.md, "Versions and build") come from an
-march=native build on an AVX-512 VNNI machine. Our AVX-512 kernel set reproduces that build's
arithmetic bit for bit; the AVX2 and scalar sets mirror other ggml builds (AVX2, no SIMD), whose
logits land 0.2-0.7 away from the AVX-512 build's, because activations are re-quantized to 8 bits
before every matmul and a last-ulp difference upstream flips int8 roundings. So the fixture's
tight bars (top-20 within 0.15, long greedy agreement, equal floats) only apply where the
reference kernel set runs; elsewhere the tests check what survives a different rounding
(the first token, logits within 1.0).
"""
from __future__ import annotations

import pytest

from edgeinfer import _core

REFERENCE_ISA = "avx512"


def require_reference_kernels() -> None:
    """Skips the calling test unless this run uses the kernel set that mirrors the reference."""
    if _core.isa() != REFERENCE_ISA:
        pytest.skip(f"llama.cpp's fixture figures come from an {REFERENCE_ISA} build; this run "
                    f"uses the {_core.isa()} kernels, which mirror another ggml build")
