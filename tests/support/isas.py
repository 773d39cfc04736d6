"""Which ISAs' kernel tables the kernel and exactness tests run their cases on.

By default every table this machine runs (`_core.available_isas()`). EDGEINFER_TEST_ISAS (names,
comma-separated) narrows that: scripts/test_avx512_emulated.sh sets it to avx512, because its build
differs from the product's only in the AVX-512 units, so the scalar and AVX2 cases would repeat
what the main run already tested against the same code.

It narrows what is tested, never what a test compares with: a reference (the scalar table; the
AVX2 table for the AVX-512 kernels built from the same source) is used wherever the machine runs
it, under test or not."""
from __future__ import annotations

import os
from collections.abc import Iterable

from edgeinfer import _core


def isas_under_test(among: Iterable[str] | None = None) -> list[str]:
    """The ISAs whose tables this run tests, in the core's order; only those of `among` if given
    (e.g. the x86 tables, or the tables that have some kernel). A name in EDGEINFER_TEST_ISAS
    that this build does not run is an error, so a typo cannot pass as a run of nothing."""
    available = _core.available_isas()
    chosen = available
    named = os.environ.get("EDGEINFER_TEST_ISAS", "").strip()
    if named:
        wanted = {name.strip() for name in named.split(",") if name.strip()}
        if not wanted or not wanted <= set(available):
            raise ValueError(f"EDGEINFER_TEST_ISAS={named} names an ISA this build does not run "
                             f"(it runs {', '.join(available)})")
        chosen = [isa for isa in available if isa in wanted]
    if among is not None:
        among = set(among)
        chosen = [isa for isa in chosen if isa in among]
    return chosen


def avx512_against_avx2() -> bool:
    """Whether to hold the AVX-512 kernels to the AVX2 ones' bits (where both tables compile one
    kernel source): the AVX-512 table is under test and the AVX2 table, the reference, runs here."""
    return "avx512" in isas_under_test() and "avx2" in _core.available_isas()
