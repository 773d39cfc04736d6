"""Hostile-input test of the GGUF reader: hundreds of truncated, bit-flipped and field-mutated
variants of a small valid file must each either load or raise ModelFormatError -- never crash,
hang or exhaust memory.

The mutations are tests/support/gguf_mutate.py's; the variants run in a child process
(tests/support/fuzz_runner.py, tests/support/gguf_fuzz_child.py) under an address-space limit and a timeout, so a
segfault or a runaway allocation fails this test instead of killing pytest, and names the variant.
"""
from __future__ import annotations

import random

from support.fuzz_runner import is_failure, run_variants
from support.gguf_fields import read_u
from support.gguf_sample import write_gguf
from support.gguf_mutate import HOSTILE, Base, Variant, flip_bits, load_base, overwrite, set_field, truncate

SEED = 20240611


def _variants(base: Base) -> list[Variant]:
    """Deterministic list of variants."""
    rng = random.Random(SEED)
    locs = [loc for owned in base.locs.values() for loc in owned]
    out: list[Variant] = []

    # Truncation at every field boundary, plus random lengths (the tensor data included).
    cuts = {loc.offset for loc in locs} | {loc.offset + loc.size for loc in locs}
    cuts |= {rng.randrange(1, base.size) for _ in range(30)} | {1, 3, 4, 8, 23, 24, base.size - 1}
    out += [truncate(base, n) for n in sorted(c for c in cuts if 0 < c < base.size)]

    # Every integer field (counts, lengths, types, dims, offsets, alignment, scalar values) set to
    # boundary values and to its own value +/- 1.
    for loc in locs:
        orig = read_u(base.head, loc.offset, loc.size)
        for value in sorted(set(HOSTILE[loc.size] + [orig + 1, orig - 1])):
            if value != orig:
                out.append(set_field(base, loc, value))

    # Random bit flips, mostly in the metadata and tensor infos where the structure lives.
    for k in range(150):
        out.append(flip_bits(base.variant("bit_flip", f"#{k}"), rng, rng.randint(1, 4), in_tail=k % 4 == 0))

    # Random 8-byte garbage at random places.
    for _ in range(40):
        out.append(overwrite(base, rng.randrange(base.header_end - 8), rng.getrandbits(64).to_bytes(8, "little")))
    return out


def test_hostile_variants_load_or_raise_model_format_error(tmp_path):
    base_path = tmp_path / "base.gguf"
    write_gguf(base_path, alignment=64)  # an explicit general.alignment key, so it gets mutated too
    variants = _variants(load_base("sample", base_path))
    assert len(variants) >= 300

    items = [(i, str(v.write(tmp_path / f"v{i:04d}.gguf"))) for i, v in enumerate(variants)]
    results, notes = run_variants(items, "reader")
    failures = [f"{v.label}: {results[i]}" for i, v in enumerate(variants) if is_failure("reader", results[i])]
    failures += [f"{v.label}: message does not start with the file path: {results[i].message}"
                 for i, v in enumerate(variants)
                 if results[i].outcome == "format_error" and not results[i].message.startswith(items[i][1] + ": ")]
    failures += notes
    assert not failures, f"{len(failures)} of {len(variants)} variants misbehaved:\n" + "\n".join(failures[:30])

    outcomes = [results[i].outcome for i in range(len(variants))]
    # The mutations must actually reach the validation code, and some must be harmless.
    assert outcomes.count("format_error") > len(variants) // 2
    assert outcomes.count("ok") > 0
