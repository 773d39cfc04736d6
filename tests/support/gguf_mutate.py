"""Mutations of valid GGUF files: the one definition the fuzz tests (tests/test_gguf_fuzz.py,
tests/test_model_load_fuzz.py) and the long run (scripts/fuzz_gguf.py) share.

A `Base` is a valid file parsed once (with gguf.GGUFReader) into where its parts are: every
integer field, each key/value entry and array element, each tensor-table entry. It is held as
`head` (header, metadata, tensor table and the padding after it) and `tail` (the tensor data);
a tail may be a count of zero bytes instead, written as a sparse file, so a real model's
metadata can be mutated without copying its weights.

A mutation kind is a function (rng, base) -> Variant that draws one random mutation. Kinds
that change a length (a key's value, an array element, a tensor's name or dims) re-encode the
entry and splice it in, keeping the counts in the header and the padding before the tensor data
consistent, so the file stays well-formed up to the one thing that was changed: those reach the
model loader and the tokenizer, which random bytes mostly would not.
"""
from __future__ import annotations

import math
import random
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

from support.gguf_fields import FieldLoc, field_locations, read_u, with_u

VT = gguf.GGUFValueType

HOSTILE_U64 = [0, 1, 2**63, 2**64 - 1, 0xFFFFFFFF, 2**32, 2**62 + 3]
HOSTILE_U32 = [0, 0xFFFFFFFF, 2**31, 13, 5]
HOSTILE_U8 = [2, 255]
HOSTILE = {8: HOSTILE_U64, 4: HOSTILE_U32, 1: HOSTILE_U8}

_PACK = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I",
         VT.INT32: "<i", VT.FLOAT32: "<f", VT.BOOL: "<B", VT.UINT64: "<Q", VT.INT64: "<q",
         VT.FLOAT64: "<d"}
INT_TYPES = [VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.UINT64, VT.INT64]
FLOAT_TYPES = [VT.FLOAT32, VT.FLOAT64]


# ---- encoding ------------------------------------------------------------------------------------

def enc_scalar(vtype: VT, value) -> bytes:
    """A fixed-size value; integers wrap to the type's width, floats out of float32 range become inf."""
    fmt = _PACK[vtype]
    if vtype in FLOAT_TYPES:
        try:
            return struct.pack(fmt, value)
        except OverflowError:
            return struct.pack(fmt, math.copysign(math.inf, value))
    bits = 8 * struct.calcsize(fmt)
    return struct.pack(fmt.upper(), int(value) & ((1 << bits) - 1))


def enc_str(raw: bytes | str) -> bytes:
    raw = raw.encode() if isinstance(raw, str) else raw
    return struct.pack("<Q", len(raw)) + raw


def enc_value(vtype: VT, value) -> bytes:
    """A value as it follows the type tag of a key/value entry; an array's is (element type, items)."""
    if vtype == VT.STRING:
        return enc_str(value)
    if vtype == VT.ARRAY:
        elem_type, items = value
        return struct.pack("<IQ", elem_type, len(items)) + b"".join(enc_value(elem_type, v) for v in items)
    return enc_scalar(vtype, value)


def enc_kv(key: str, vtype: VT, value) -> bytes:
    return enc_str(key) + struct.pack("<I", vtype) + enc_value(vtype, value)


def enc_tensor_info(name: bytes, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (enc_str(name) + struct.pack("<I", len(dims)) + b"".join(enc_scalar(VT.UINT64, d) for d in dims)
            + struct.pack("<IQ", ggml_type & 0xFFFFFFFF, offset & (2**64 - 1)))


# ---- a parsed base file --------------------------------------------------------------------------

@dataclass
class Kv:
    key: str
    start: int                  # the entry: key length .. end of the value
    end: int
    vtype: VT
    value_start: int            # just after the type tag
    elem_type: VT | None = None
    elems: list[tuple[int, int]] = field(default_factory=list)  # arrays: [start, end) of each element


@dataclass
class TensorEntry:
    name: bytes
    start: int                  # the tensor-table entry: name length .. end of the offset
    end: int
    dims: list[int]
    ggml_type: int
    offset: int                 # relative to the data section
    nbytes: int


@dataclass
class Variant:
    """One mutated file: `head` then `tail` (bytes, or that many zero bytes written sparse)."""
    kind: str
    label: str
    head: bytes
    tail: bytes | int

    def write(self, path: Path) -> Path:
        with open(path, "wb") as f:
            f.write(self.head)
            if isinstance(self.tail, int):
                f.truncate(len(self.head) + self.tail)  # a hole: zeros that take no disk
            else:
                f.write(self.tail)
        return path


@dataclass
class Base:
    name: str
    head: bytes
    tail: bytes | int
    header_end: int             # end of the tensor table; head[header_end:] is padding
    alignment: int
    locs: dict[str, list[FieldLoc]]  # integer fields by owner ("kv 'x'", "tensor 'y'")
    kvs: dict[str, Kv]
    tensors: list[TensorEntry]

    @property
    def data_offset(self) -> int:
        return len(self.head)

    @property
    def size(self) -> int:
        return len(self.head) + (self.tail if isinstance(self.tail, int) else len(self.tail))

    def variant(self, kind: str, label: str, head: bytes | None = None, tail: bytes | int | None = None) -> Variant:
        return Variant(kind, label, self.head if head is None else head, self.tail if tail is None else tail)

    def splice(self, start: int, end: int, new: bytes, d_kv: int = 0, d_tensors: int = 0) -> bytes:
        """The head with header bytes [start, end) replaced by `new`, the header's counts moved by
        d_kv / d_tensors, and the padding redone so the tensor data starts aligned again."""
        assert 0 <= start <= end <= self.header_end
        header = bytearray(self.head[:start] + new + self.head[end:self.header_end])
        for at, d in ((8, d_tensors), (16, d_kv)):
            if d:
                header[at:at + 8] = struct.pack("<Q", (read_u(header, at, 8) + d) % 2**64)
        pad = -len(header) % self.alignment
        return bytes(header) + bytes(pad)


def load_base(name: str, path: Path, sparse_tail: bool = False) -> Base:
    """Parses a valid GGUF file. sparse_tail: keep only the head; the tensor data becomes zeros
    (for a real model, whose metadata is what gets mutated)."""
    reader = gguf.GGUFReader(str(path))
    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        head = f.read(reader.data_offset)
        tail: bytes | int = size - reader.data_offset if sparse_tail else f.read()

    locs: dict[str, list[FieldLoc]] = {}
    for loc in field_locations(path, reader):
        locs.setdefault(loc.label.split(" part ")[0], []).append(loc)

    kvs: dict[str, Kv] = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue  # the header's own fields, reported as keys by the reader
        end = fld.offset + sum(int(p.nbytes) for p in fld.parts)
        kv = Kv(key, fld.offset, end, VT(fld.types[0]), fld.offset + int(fld.parts[0][0]) + 12)
        if kv.vtype == VT.ARRAY:
            kv.elem_type = VT(int(fld.parts[3][0]))
            at, count = kv.value_start + 12, int(fld.parts[4][0])
            if kv.elem_type == VT.STRING:  # parts: (length, bytes) per element
                for i in range(5, len(fld.parts), 2):
                    n = 8 + int(fld.parts[i][0])
                    kv.elems.append((at, at + n))
                    at += n
            else:
                width = struct.calcsize(_PACK[kv.elem_type])
                kv.elems = [(at + i * width, at + (i + 1) * width) for i in range(count)]
        kvs[key] = kv

    tensors = []
    for t in reader.tensors:
        parts = t.field.parts
        end = t.field.offset + sum(int(p.nbytes) for p in parts)
        tensors.append(TensorEntry(bytes(parts[1]), t.field.offset, end, [int(d) for d in parts[3]],
                                   int(parts[4][0]), int(parts[5][0]), int(t.n_bytes)))
    header_end = max([t.end for t in tensors] + [kv.end for kv in kvs.values()] + [24])
    alignment = int(reader.alignment)
    return Base(name, head, tail, header_end, alignment, locs, kvs, tensors)


# ---- primitives the kinds and the tests' enumerations build on -----------------------------------

def set_field(base: Base, loc: FieldLoc, value: int, kind: str = "int_field") -> Variant:
    return base.variant(kind, f"{loc.label} = {value}", head=with_u(base.head, loc.offset, loc.size, value))


def truncate(base: Base, n: int) -> Variant:
    """The first n bytes of the file."""
    if n <= len(base.head):
        return base.variant("truncate", f"truncate to {n} bytes", head=base.head[:n], tail=b"")
    keep = n - len(base.head)
    tail = keep if isinstance(base.tail, int) else base.tail[:keep]
    return base.variant("truncate", f"truncate to {n} bytes", tail=tail)


def flip_bits(v: Variant, rng: random.Random, n_flips: int, in_tail: bool = False) -> Variant:
    """v with n_flips random bits flipped in its head (or, for an in-memory tail, anywhere)."""
    head, tail = bytearray(v.head), v.tail
    whole = in_tail and not isinstance(tail, int)
    data = bytearray(head + tail) if whole else head
    at = sorted(rng.randrange(len(data)) for _ in range(n_flips))
    for a in at:
        data[a] ^= 1 << rng.randrange(8)
    if whole:
        head, tail = data[:len(v.head)], bytes(data[len(v.head):])
    return Variant(v.kind, f"{v.label}; bits flipped at {at}" if v.label else f"bits flipped at {at}", bytes(head), tail)


def overwrite(base: Base, at: int, raw: bytes, kind: str = "garbage") -> Variant:
    return base.variant(kind, f"{len(raw)} bytes {raw.hex()} at {at}",
                        head=base.head[:at] + raw + base.head[at + len(raw):])


# ---- value pools ---------------------------------------------------------------------------------

def _n_vocab(base: Base) -> int:
    kv = base.kvs.get("tokenizer.ggml.tokens")
    return len(kv.elems) if kv else 0


def _hostile_int(rng: random.Random, base: Base, orig: int | None) -> int:
    n = _n_vocab(base)
    pool = [0, 1, -1, 2, 3, 7, 16, 64, 2**31 - 1, -2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1,
            n - 1, n, n + 1, rng.randrange(1 << 16)]
    if orig is not None:
        pool += [orig - 1, orig + 1, orig * 2, orig // 2, orig * 64, -orig]
    return rng.choice(pool)


def _hostile_float(rng: random.Random, orig: float | None) -> float:
    pool = [0.0, -0.0, -1.0, 1.0, 0.5, 1e-30, 1e30, 3.4e38, math.inf, -math.inf, math.nan, 1e-6, 10000.0]
    if orig is not None:
        pool += [orig * 2, -orig, orig / 3]
    return rng.choice(pool)


# Bytes for strings and token texts: empty, invalid UTF-8, NULs, long, special-token-looking,
# SentencePiece byte-token forms, text that looks like a merge.
_STRINGS = [b"", b" ", b"\x00", b"\xff\xfe", b"\xc3", b"\xe2\x96", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
            b"\xe2\x96\x81", b"\xe2\x96\x81\xe2\x96\x81", b"<0x", b"<0xZZ>", b"<0x41>", b"<0x00>", b"<0xFF>",
            b"<|im_end|>", b"<|im_start|>", b"<|endoftext|>", b"<|end|>", b"<|call|>", b"<|return|>",
            b"</s>", b"<s>", b"<unk>", b"<eos>", b"<bos>", b"<mask>", b"<|fim_prefix|>", b"<|eot_id|>",
            b"<|tool_response>", b"<unused0>", b"unused", b"[EOS]", b"a b", b"a b c", b" a", b"a ",
            b"\xc4\xa0 t", b"\xc4\xa0", b"<", b">", b"<|", b"|>", b"hello", b"x" * 300, b"\xe6\x97\xa5" * 100]
_TEMPLATES = [
    "", "{{", "{% for %}", "{{ raise_exception('no') }}", "{{ messages[0]['content'] }}",
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
    "{{ bos_token }}{{ eos_token }}{% if add_generation_prompt %}>{% endif %}",
    "{{ ''.__class__.__mro__ }}", "{{ messages|length }}{{ x.y.z }}", "{% set x = 1 %}{{ x / 0 }}",
    "{{ range(100000)|join(',') }}", "<|im_start|>\xff{{ messages }}",
]


def _random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(n))


def _hostile_string(rng: random.Random, base: Base) -> bytes:
    r = rng.random()
    if r < 0.6:
        return rng.choice(_STRINGS)
    if r < 0.8:
        return _random_bytes(rng, rng.randint(1, 12))
    kv = base.kvs.get("tokenizer.ggml.tokens")
    if kv:  # some token's text: makes a duplicate
        a, b = rng.choice(kv.elems)
        return base.head[a + 8:b]
    return b"llama"


def _key_string(key: str, rng: random.Random, base: Base) -> bytes:
    """A replacement string for a key: names the reader knows for the keys it dispatches on."""
    if key == "tokenizer.chat_template":
        return rng.choice(_TEMPLATES).encode("utf-8", "surrogateescape")
    if rng.random() < 0.5:
        if key == "general.architecture":
            return rng.choice([b"llama", b"gemma3", b"qwen2", b"qwen3", b"phi3", b"gemma2", b"bert", b"LLAMA"])
        if key == "tokenizer.ggml.model":
            return rng.choice([b"gpt2", b"llama", b"bert", b"t5", b"rwkv", b"none", b"GPT2"])
        if key == "tokenizer.ggml.pre":
            return rng.choice([b"default", b"llama3", b"llama-bpe", b"dbrx", b"glm4", b"gpt-2", b"smollm",
                               b"qwen2", b"falcon", b"jina-v2-de", b"deepseek-llm", b"tekken", b"unknown"])
        if key == "general.name":
            return rng.choice([b"phi-3 mini", b"modern-bert", b"Phi3", b""])
        if key.endswith("rope.scaling.type"):
            return rng.choice([b"linear", b"yarn", b"none", b"longrope", b""])
    return _hostile_string(rng, base)


def _random_value(rng: random.Random, base: Base, key: str, orig_type: VT | None, orig) -> tuple[VT, object]:
    """A new (type, value) for `key`: mostly its own type with a hostile value, sometimes another type."""
    vtype = orig_type if orig_type is not None and rng.random() < 0.75 else rng.choice(
        INT_TYPES + FLOAT_TYPES + [VT.BOOL, VT.STRING, VT.ARRAY])
    if vtype in INT_TYPES:
        return rng.choice(INT_TYPES) if rng.random() < 0.2 else vtype, _hostile_int(
            rng, base, orig if isinstance(orig, int) else None)
    if vtype in FLOAT_TYPES:
        return vtype, _hostile_float(rng, orig if isinstance(orig, float) else None)
    if vtype == VT.BOOL:
        return VT.BOOL, rng.choice([0, 1, 1, 2])
    if vtype == VT.STRING:
        return VT.STRING, _key_string(key, rng, base)
    return VT.ARRAY, (rng.choice([VT.INT32, VT.STRING, VT.FLOAT32]), [])


def _decode_scalar(base: Base, kv: Kv):
    if kv.vtype == VT.STRING:
        return base.head[kv.value_start + 8:kv.end]
    if kv.vtype == VT.ARRAY:
        return None
    return struct.unpack_from(_PACK[kv.vtype], base.head, kv.value_start)[0]


# ---- the mutation kinds --------------------------------------------------------------------------

def mut_truncate(rng: random.Random, base: Base) -> Variant:
    """Cut at a field boundary, at the end of the tensor table, or anywhere."""
    r = rng.random()
    if r < 0.5:
        loc = rng.choice(rng.choice(list(base.locs.values())))
        n = loc.offset + rng.choice([0, loc.size])
    elif r < 0.7:
        n = rng.choice([base.header_end, base.data_offset, base.size - 1, 4, 8, 23, 24])
    else:
        n = rng.randrange(1, base.size)
    return truncate(base, max(1, min(n, base.size - 1)))


def mut_header(rng: random.Random, base: Base) -> Variant:
    r = rng.random()
    if r < 0.15:
        return overwrite(base, 0, rng.choice([b"GGUG", b"FUGG", b"\0\0\0\0", b"ggml", b"GGJT"]), kind="header")
    if r < 0.35:
        value = rng.choice([0, 1, 2, 3, 4, 0x03000000, 0x02000000, 0xFFFFFFFF])
        return set_field(base, FieldLoc("header version", 4, 4), value, kind="header")
    at, name = rng.choice([(8, "n_tensors"), (16, "n_kv")])
    orig = read_u(base.head, at, 8)
    value = rng.choice(HOSTILE_U64 + [orig - 1, orig + 1, orig + 2, orig // 2, 0])
    return set_field(base, FieldLoc(f"header {name}", at, 8), value % 2**64, kind="header")


def mut_int_field(rng: random.Random, base: Base) -> Variant:
    """Any integer field (lengths, types, counts, dims, offsets, scalar values, array elements) set
    to a boundary value or to its own value +/- 1. Owners are drawn first, keys and tensors alike,
    so a 49k-element array does not drown the rest."""
    loc = rng.choice(base.locs[rng.choice(list(base.locs))])
    orig = read_u(base.head, loc.offset, loc.size)
    values = sorted(set(HOSTILE[loc.size] + [orig + 1, orig - 1]) - {orig})
    return set_field(base, loc, rng.choice(values) % (1 << (8 * loc.size)))


def mut_bit_flip(rng: random.Random, base: Base) -> Variant:
    return flip_bits(base.variant("bit_flip", ""), rng, rng.randint(1, 6), in_tail=rng.random() < 0.2)


def mut_garbage(rng: random.Random, base: Base) -> Variant:
    n = rng.choice([1, 2, 4, 8, 16])
    return overwrite(base, rng.randrange(base.header_end - n), _random_bytes(rng, n))


def mut_byte_splice(rng: random.Random, base: Base) -> Variant:
    """A run of header bytes deleted or repeated (everything after it shifts)."""
    n = rng.choice([1, 3, 4, 7, 8, 13, 64])
    at = rng.randrange(24, base.header_end - n)
    if rng.random() < 0.5:
        return base.variant("byte_splice", f"{n} bytes deleted at {at}", head=base.head[:at] + base.head[at + n:])
    return base.variant("byte_splice", f"{n} bytes repeated at {at}",
                        head=base.head[:at + n] + base.head[at:at + n] + base.head[at + n:])


def set_kv(base: Base, key: str, vtype: VT, value, kind: str = "kv_value") -> Variant:
    """`key`'s value replaced by `value` of type `vtype` (arrays: (element type, items))."""
    kv = base.kvs[key]
    new = base.head[kv.start:kv.value_start - 4] + struct.pack("<I", vtype) + enc_value(vtype, value)
    return base.variant(kind, f"{key} = {vtype.name} {_show(value)}", head=base.splice(kv.start, kv.end, new))


def mut_kv_value(rng: random.Random, base: Base) -> Variant:
    """One key's value replaced, re-encoded: a hostile value of its type, or another type."""
    kv = rng.choice(list(base.kvs.values()))
    vtype, value = _random_value(rng, base, kv.key, kv.vtype, _decode_scalar(base, kv))
    return set_kv(base, kv.key, vtype, value)


def mut_kv_remove(rng: random.Random, base: Base) -> Variant:
    kv = rng.choice(list(base.kvs.values()))
    return base.variant("kv_remove", f"{kv.key} removed", head=base.splice(kv.start, kv.end, b"", d_kv=-1))


def _added_keys(base: Base) -> list[str]:
    kv = base.kvs.get("general.architecture")
    arch = _decode_scalar(base, kv) if kv else None
    arch = arch.decode("utf-8", "replace") if isinstance(arch, bytes) else "llama"
    return [f"{arch}.{k}" for k in (
        "attention.key_length", "attention.value_length", "rope.scaling.type", "rope.scaling.factor",
        "attention.sliding_window", "final_logit_softcapping", "rope.dimension_count", "context_length",
        "attention.head_count_kv", "rope.freq_base", "rope.freq_base_swa", "attention.layer_norm_rms_epsilon")] + [
        "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
        "tokenizer.ggml.scores", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.pre",
        "general.alignment", "tokenizer.chat_template", "general.name"]


def mut_kv_add(rng: random.Random, base: Base) -> Variant:
    """A key added before the tensor table: one the loader reads that the file lacks (or has:
    a duplicate), with a hostile value; arrays get the vocabulary's length, or near it."""
    key = rng.choice(_added_keys(base) + [rng.choice(list(base.kvs))])
    n = _n_vocab(base)
    if key.endswith(("scores", "merges", "token_type")):
        elem = {"scores": VT.FLOAT32, "merges": VT.STRING, "token_type": VT.INT32}[key.rsplit(".", 1)[1]]
        count = rng.choice([n, n - 1, n + 1, 0, 1])
        items = [_hostile_element(rng, base, elem) for _ in range(count)]
        vtype, value = VT.ARRAY, (elem, items)
    elif key == "general.alignment":
        vtype, value = rng.choice([VT.UINT32, VT.UINT64]), rng.choice([1, 2, 4, 8, 16, 64, 3, 0])
    else:
        orig_type = VT.BOOL if "add_" in key else VT.STRING if key.endswith(("type", "pre", "template", "name")) \
            else VT.FLOAT32 if key.endswith(("factor", "capping", "base", "base_swa", "epsilon")) else VT.UINT32
        vtype, value = _random_value(rng, base, key, orig_type, None)
    return base.variant("kv_add", f"{key} added = {vtype.name} {_show(value)}", head=add_kvs(base, [(key, vtype, value)]))


def _hostile_element(rng: random.Random, base: Base, elem_type: VT, token_type: bool = False):
    """An array element: token texts and merges, token types (mostly the known ones), scores."""
    if elem_type == VT.STRING:
        return _hostile_string(rng, base)
    if elem_type in FLOAT_TYPES:
        return _hostile_float(rng, None)
    if elem_type == VT.BOOL:
        return rng.choice([0, 1, 2, 255])
    if token_type and rng.random() < 0.7:
        return rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, 7, 255])
    return _hostile_int(rng, base, None)


def _array_kvs(base: Base) -> list[Kv]:
    """Arrays, the tokenizer's weighted up (they are what the vocabulary reads)."""
    arrays = [kv for kv in base.kvs.values() if kv.vtype == VT.ARRAY]
    return arrays + [kv for kv in arrays if kv.key.startswith("tokenizer.")] * 3


def _pick_index(rng: random.Random, n: int) -> int:
    """An element index, biased to the first tokens (where the special ones live) and the last."""
    return min(n - 1, rng.choice([0, 1, 2, 3, n - 1, n // 2, rng.randrange(n), rng.randrange(min(n, 300))]))


def mut_array_elem(rng: random.Random, base: Base) -> Variant:
    """One element of an array (a token's text, a merge, a token type, a score) replaced."""
    kv = rng.choice(_array_kvs(base))
    if not kv.elems:
        return mut_kv_value(rng, base)
    i = _pick_index(rng, len(kv.elems))
    a, b = kv.elems[i]
    value = _hostile_element(rng, base, kv.elem_type, token_type="token_type" in kv.key)
    return base.variant("array_elem", f"{kv.key}[{i}] = {_show(value)}",
                        head=base.splice(a, b, enc_value(kv.elem_type, value)))


def mut_array_resize(rng: random.Random, base: Base) -> Variant:
    """An array shortened, lengthened (count and elements together), emptied, or re-encoded with
    another element type."""
    kv = rng.choice(_array_kvs(base))
    n, count_at = len(kv.elems), kv.value_start + 4
    r = rng.random()
    if r < 0.35 and n:
        k = min(n - 1, max(0, rng.choice([n - 1, n - 2, n // 2, 1, 0])))
        kept = base.head[kv.elems[0][0]:kv.elems[k][0]]
        head = base.splice(count_at, kv.end, struct.pack("<Q", k) + kept)
        return base.variant("array_resize", f"{kv.key} cut to {k} of {n}", head=head)
    if r < 0.7:
        extra = rng.choice([1, 2, 5])
        added = [base.head[slice(*rng.choice(kv.elems))] if kv.elems and rng.random() < 0.5 else
                 enc_value(kv.elem_type, _hostile_element(rng, base, kv.elem_type)) for _ in range(extra)]
        body = base.head[kv.value_start + 12:kv.end] + b"".join(added)
        head = base.splice(count_at, kv.end, struct.pack("<Q", n + extra) + body)
        return base.variant("array_resize", f"{kv.key} grown by {extra} to {n + extra}", head=head)
    if kv.elem_type == VT.STRING:
        new_type = rng.choice([VT.INT32, VT.UINT8, VT.FLOAT32])
        items = [0] * n
    else:
        new_type = rng.choice([t for t in INT_TYPES + FLOAT_TYPES + [VT.BOOL] if t != kv.elem_type])
        fmt = _PACK[kv.elem_type]
        items = [struct.unpack_from(fmt, base.head, a)[0] for a, _ in kv.elems]
        if new_type not in FLOAT_TYPES:
            items = [int(x) if math.isfinite(x) else 0 for x in items]
        if new_type == VT.BOOL:
            items = [x & 1 for x in items]
    head = base.splice(kv.value_start, kv.end, _encode_array(new_type, items))
    return base.variant("array_resize", f"{kv.key} re-encoded as {new_type.name}", head=head)


def _encode_array(elem_type: VT, items: list) -> bytes:
    """An array, fast enough for a 49k-entry vocabulary (numpy for the fixed-size types)."""
    if elem_type == VT.STRING:
        return enc_value(VT.ARRAY, (elem_type, items))
    if elem_type in FLOAT_TYPES:
        with np.errstate(over="ignore"):
            arr = np.asarray(items, np.float64).astype("<f4" if elem_type == VT.FLOAT32 else "<f8")
    else:
        width = struct.calcsize(_PACK[elem_type])
        arr = np.array([int(x) & ((1 << (8 * width)) - 1) for x in items], dtype=f"<u{width}")
    return struct.pack("<IQ", elem_type, len(items)) + arr.tobytes()


def mut_tensor_info(rng: random.Random, base: Base) -> Variant:
    """A tensor-table entry: a dimension, the number of dims, the type, the offset or the name
    changed, the entry removed or repeated."""
    i = rng.randrange(len(base.tensors))
    t = base.tensors[i]
    dims, ttype, offset, name = list(t.dims), t.ggml_type, t.offset, t.name
    r = rng.random()
    d_tensors = 0
    if r < 0.3:
        d = rng.randrange(len(dims))
        other = rng.choice(base.tensors).dims
        dims[d] = rng.choice([0, 1, dims[d] - 1, dims[d] + 1, dims[d] * 2, dims[d] // 2, 16, 32, 256, 2**31,
                              2**32, 2**62, 2**63 - 1, 2**64 - 1, rng.choice(other)]) % 2**64
        what = f"dims {t.dims} -> {dims}"
    elif r < 0.4:
        dims = rng.choice([dims + [1], dims + [2], dims[:-1] or [1], [math.prod(dims)], dims[::-1],
                           dims + [1, 1, 1, 1]])
        what = f"dims {t.dims} -> {dims}"
    elif r < 0.55:
        ttype = rng.choice([0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 23, 24, 26, 28, 30, 34, 39,
                            4, 5, 31, 99, 2**31])
        what = f"type {t.ggml_type} -> {ttype}"
    elif r < 0.7:
        data_bytes = base.size - base.data_offset
        other = rng.choice(base.tensors).offset
        offset = rng.choice([0, offset + base.alignment, offset - base.alignment, offset + 1, other,
                             data_bytes - t.nbytes, data_bytes, 2**63, 2**64 - base.alignment]) % 2**64
        what = f"offset {t.offset} -> {offset}"
    elif r < 0.85:
        other = rng.choice(base.tensors).name
        name = rng.choice([other, b"x" + name, name.replace(b"blk.0", b"blk.99"), b"output.weight",
                           b"rope_freqs.weight", name + b"\xff", b"", b"blk.-1.attn_q.weight"])
        what = f"name {t.name!r} -> {name!r}"
    elif r < 0.93:
        return base.variant("tensor_info", f"tensor {t.name!r} removed",
                            head=base.splice(t.start, t.end, b"", d_tensors=-1))
    else:
        d_tensors = 1
        what = "repeated"
    new = enc_tensor_info(name, dims, ttype, offset)
    if d_tensors:
        new = base.head[t.start:t.end] + new
    return base.variant("tensor_info", f"tensor {t.name!r} {what}",
                        head=base.splice(t.start, t.end, new, d_tensors=d_tensors))


def mut_tensor_data(rng: random.Random, base: Base) -> Variant:
    """Weights overwritten with NaN, inf, huge or random bytes (quantized scales included)."""
    assert not isinstance(base.tail, int), "a sparse tail has no bytes to change"
    t = rng.choice([t for t in base.tensors if 0 < t.nbytes and t.offset + t.nbytes <= len(base.tail)])
    n = min(t.nbytes, rng.choice([4, 16, 64, 256]))
    at = t.offset + rng.randrange(t.nbytes - n + 1)
    raw = rng.choice([np.full(n // 4, np.nan, np.float32).tobytes(), np.full(n // 4, np.inf, np.float32).tobytes(),
                      np.full(n // 4, 3e38, np.float32).tobytes(), _random_bytes(rng, n), b"\xff" * n])
    raw = raw.ljust(n, b"\0")
    tail = base.tail[:at] + raw + base.tail[at + n:]
    return base.variant("tensor_data", f"{t.name!r} bytes {at - t.offset}..{at - t.offset + n}", tail=tail)


# Kinds whose files the gguf package's reader still parses (well-formed, one thing wrong), so
# another mutation can be stacked on them.
WELL_FORMED = ["kv_value", "kv_remove", "kv_add", "array_elem", "array_resize", "tensor_info", "tensor_data"]


def mut_stacked(rng: random.Random, base: Base) -> Variant:
    """Two or three well-formed mutations, each applied to the re-parsed result of the one
    before, sometimes with bit flips on top: the second fault meets code the first one opened
    (an alignment key that moves the data, then an offset; a shorter vocabulary, then an id)."""
    labels, cur = [], base
    with tempfile.TemporaryDirectory(prefix="gguf_stack_") as tmp:
        for depth in range(rng.choice([2, 2, 3])):
            v = KINDS[rng.choice(WELL_FORMED)][1](rng, cur)
            labels.append(f"{v.kind}: {v.label}")
            try:
                cur = load_base(base.name, v.write(Path(tmp) / f"{depth}.gguf"))
            except Exception:  # noqa: BLE001 -- beyond what gguf's reader takes: stack no further
                break
    v = Variant("stacked", " + ".join(labels), v.head, v.tail)
    return flip_bits(v, rng, rng.randint(1, 3)) if rng.random() < 0.25 else v


def _show(value) -> str:
    s = repr(value)
    return s if len(s) <= 80 else s[:77] + "..."


KINDS: dict[str, tuple[float, Callable[[random.Random, Base], Variant]]] = {
    # kind: (weight, function). The structured kinds weigh most: they reach past the reader.
    # tensor_data and stacked need the weights in memory (not a sparse tail).
    "truncate": (6, mut_truncate),
    "header": (3, mut_header),
    "int_field": (12, mut_int_field),
    "bit_flip": (8, mut_bit_flip),
    "garbage": (4, mut_garbage),
    "byte_splice": (3, mut_byte_splice),
    "kv_value": (14, mut_kv_value),
    "kv_remove": (5, mut_kv_remove),
    "kv_add": (7, mut_kv_add),
    "array_elem": (14, mut_array_elem),
    "array_resize": (6, mut_array_resize),
    "tensor_info": (12, mut_tensor_info),
    "tensor_data": (4, mut_tensor_data),
    "stacked": (8, mut_stacked),
}
NEED_DATA = {"tensor_data", "stacked"}


def draw(rng: random.Random, base: Base, kind: str | None = None) -> Variant:
    """One random variant of `base` (of `kind`, else a kind drawn by weight)."""
    if kind is None:
        kinds = [k for k in KINDS if not (k in NEED_DATA and isinstance(base.tail, int))]
        kind = rng.choices(kinds, weights=[KINDS[k][0] for k in kinds])[0]
    return KINDS[kind][1](rng, base)


def add_kvs(base: Base, entries: list[tuple[str, VT, object]]) -> bytes:
    """The base's head with (key, type, value) entries appended to the metadata (arrays:
    (element type, items))."""
    at = max(kv.end for kv in base.kvs.values())
    return base.splice(at, at, b"".join(enc_kv(*e) for e in entries), d_kv=len(entries))
