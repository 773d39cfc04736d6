"""Hostile-input test of the GGUF reader: hundreds of truncated, bit-flipped and field-mutated
variants of a small valid file must each either load or raise ModelFormatError -- never crash,
hang or exhaust memory.

The variants run in a child process (tests/gguf_fuzz_child.py) under an address-space limit and a
timeout, so a segfault or a runaway allocation fails this test instead of killing pytest. If the
child dies, the variants it had not reported are re-run one per process to name the culprit.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gguf_helpers import field_locations, read_u, with_u, write_gguf

CHILD = Path(__file__).with_name("gguf_fuzz_child.py")
REPO = Path(__file__).resolve().parent.parent
MEMORY_LIMIT = 2 << 30   # bytes of address space for the child
BATCH_TIMEOUT = 60.0     # seconds for a whole batch (normally ~1 s)
SINGLE_TIMEOUT = 10.0
SEED = 20240611

HOSTILE_U64 = [0, 1, 2**63, 2**64 - 1, 0xFFFFFFFF, 2**32, 2**62 + 3]
HOSTILE_U32 = [0, 0xFFFFFFFF, 2**31, 13, 5]
HOSTILE_U8 = [2, 255]


def _variants(base: bytes, base_path: Path) -> list[tuple[str, bytes]]:
    """Deterministic list of (description, file bytes)."""
    rng = random.Random(SEED)
    locs = field_locations(base_path)
    out: list[tuple[str, bytes]] = []

    # Truncation at every field boundary, plus random lengths (the tensor data included).
    cuts = {loc.offset for loc in locs} | {loc.offset + loc.size for loc in locs}
    cuts |= {rng.randrange(1, len(base)) for _ in range(30)} | {1, 3, 4, 8, 23, 24, len(base) - 1}
    out += [(f"truncate to {n} bytes", base[:n]) for n in sorted(c for c in cuts if 0 < c < len(base))]

    # Every integer field (counts, lengths, types, dims, offsets, alignment, scalar values) set to
    # boundary values and to its own value +/- 1.
    for loc in locs:
        orig = read_u(base, loc.offset, loc.size)
        hostile = {8: HOSTILE_U64, 4: HOSTILE_U32, 1: HOSTILE_U8}[loc.size]
        for value in sorted(set(hostile + [orig + 1, orig - 1])):
            if value != orig:
                out.append((f"{loc.label} = {value}", with_u(base, loc.offset, loc.size, value)))

    # Random bit flips, mostly in the metadata and tensor infos where the structure lives.
    header_end = max(loc.offset + loc.size for loc in locs)
    for k in range(150):
        data = bytearray(base)
        span = header_end if k % 4 else len(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(span)] ^= 1 << rng.randrange(8)
        out.append((f"bit flips #{k}", bytes(data)))

    # Random 8-byte garbage at random places.
    for k in range(40):
        at = rng.randrange(header_end - 8)
        out.append((f"garbage u64 at {at}", with_u(base, at, 8, rng.getrandbits(64))))
    return out


def _run_child(items: list[tuple[int, str]], timeout: float) -> tuple[dict[int, dict], str]:
    """Runs the child on `items`; returns the reported results by id and a note on how it ended."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, str(CHILD), str(MEMORY_LIMIT)], input=json.dumps(items),
                              capture_output=True, text=True, timeout=timeout, env=env)
        stdout, ending = proc.stdout, f"exit code {proc.returncode}"
        if proc.returncode != 0:
            ending += f"; stderr: {proc.stderr[-2000:]}"
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
        stdout, ending = (out.decode() if isinstance(out, bytes) else out), f"timed out after {timeout} s"
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["id"]] = r
    return results, ending


def test_hostile_variants_load_or_raise_model_format_error(tmp_path):
    base_path = tmp_path / "base.gguf"
    write_gguf(base_path, alignment=64)  # an explicit general.alignment key, so it gets mutated too
    base = base_path.read_bytes()
    variants = _variants(base, base_path)
    assert len(variants) >= 300

    items = []
    for i, (_, data) in enumerate(variants):
        path = tmp_path / f"v{i:04d}.gguf"
        path.write_bytes(data)
        items.append((i, str(path)))

    results, ending = _run_child(items, BATCH_TIMEOUT)
    failures = []
    missing = [item for item in items if item[0] not in results]
    if missing:
        # The batch child died or hung: run each unreported variant alone to name the culprits.
        for item in missing:
            single, single_ending = _run_child([item], SINGLE_TIMEOUT)
            if item[0] in single:
                results.update(single)
            else:
                failures.append(f"{variants[item[0]][0]}: child died ({single_ending})")
        if not failures:
            failures.append(f"the batch child ended with {ending}, yet every unreported variant passed alone")

    for i, (desc, _) in enumerate(variants):
        r = results.get(i)
        if r is None:
            continue
        if r["outcome"] == "other":
            failures.append(f"{desc}: {r['detail']}")
        elif r["outcome"] == "format_error" and not r["detail"].startswith(items[i][1] + ": "):
            failures.append(f"{desc}: message does not start with the file path: {r['detail']}")
    assert not failures, f"{len(failures)} of {len(variants)} variants misbehaved:\n" + "\n".join(failures[:30])

    outcomes = [results[i]["outcome"] for i in range(len(variants))]
    # The mutations must actually reach the validation code, and some must be harmless.
    assert outcomes.count("format_error") > len(variants) // 2
    assert outcomes.count("ok") > 0
