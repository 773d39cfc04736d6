"""The few fields of a SentencePiece model file (a ModelProto message) the converter needs beyond
what the `sentencepiece` package answers: the trainer's model type and the normalizer's charsmap
and space flags. Read from the protobuf wire format directly, so converting needs no `protobuf`
package (llama.cpp's converter imports sentencepiece_model_pb2, which does)."""
from __future__ import annotations

from dataclasses import dataclass

from edgeinfer.errors import ModelFormatError

# Field numbers in sentencepiece_model.proto.
_MODEL_TRAINER_SPEC, _MODEL_NORMALIZER_SPEC = 2, 3
_TRAINER_MODEL_TYPE = 3                                   # enum: 1 UNIGRAM, 2 BPE, 3 WORD, 4 CHAR
_NORMALIZER_CHARSMAP, _NORMALIZER_ADD_DUMMY_PREFIX, _NORMALIZER_REMOVE_EXTRA_WS = 2, 3, 4
UNIGRAM = 1


@dataclass
class SentencePieceNormalizer:
    model_type: int                   # trainer_spec.model_type (UNIGRAM = 1, the default)
    precompiled_charsmap: bytes       # normalizer_spec.precompiled_charsmap
    add_dummy_prefix: bool            # normalizer_spec.add_dummy_prefix (default true)
    remove_extra_whitespaces: bool    # normalizer_spec.remove_extra_whitespaces (default true)


def _fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Every field of one message: number -> its values (varints as int, length-delimited
    fields as bytes; fixed-width ones are skipped)."""
    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if i >= len(data):
                raise ModelFormatError("truncated SentencePiece model (a varint runs past the end)")
            b = data[i]
            value |= (b & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if b < 0x80:
                return value, i

    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(data):
        key, i = varint(i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(i)
            out.setdefault(number, []).append(value)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = varint(i)
            out.setdefault(number, []).append(data[i:i + n])
            i += n
        else:
            raise ModelFormatError(f"not a SentencePiece model (protobuf wire type {wire})")
    return out


def read_normalizer(model_bytes: bytes) -> SentencePieceNormalizer:
    """The model type and normalizer settings of a serialized SentencePiece model."""
    model = _fields(model_bytes)
    trainer = _fields(model.get(_MODEL_TRAINER_SPEC, [b""])[-1])
    norm = _fields(model.get(_MODEL_NORMALIZER_SPEC, [b""])[-1])
    return SentencePieceNormalizer(
        model_type=int(trainer.get(_TRAINER_MODEL_TYPE, [UNIGRAM])[-1]),
        precompiled_charsmap=bytes(norm.get(_NORMALIZER_CHARSMAP, [b""])[-1]),
        add_dummy_prefix=bool(norm.get(_NORMALIZER_ADD_DUMMY_PREFIX, [1])[-1]),
        remove_extra_whitespaces=bool(norm.get(_NORMALIZER_REMOVE_EXTRA_WS, [1])[-1]))
