"""Child process of the GGUF fuzz runs (tests/support/fuzz_runner.py starts it).

    python3 gguf_fuzz_child.py MODE MEMORY_LIMIT < [[id, path], ...]

Limits its own address space to MEMORY_LIMIT bytes (0: no limit), then handles each file in MODE:
  reader  opens it with _core.GgufFile and touches everything a caller can reach (metadata,
          typed getters, every tensor's bytes);
  model   edgeinfer.Model.load(path, n_ctx=64, n_threads=1), then tokenize (ASCII, multi-byte
          UTF-8, special-token text parsed), detokenize, one decode step on two tokens, and the
          chat prompt (the file's template, rendered in the sandbox).
Prints one JSON line per file as soon as it is done, so that if the process dies the parent
knows which variant was running:
    {"id": 17, "outcome": "ok" | "format_error" | "error" | "other",
     "stage": "load", "type": "ModelFormatError", "message": "..."}
format_error is a ModelFormatError; error another EdgeInferError or a plain ValueError (what
the API raises on purpose); other is anything else (MemoryError, KeyError, UnicodeDecodeError...).
"""
import json
import resource
import sys

TEXTS = [  # (text, parse_special)
    ("Hello world, the quick brown fox: 1234567 tokens!", False),
    ("héllo wörld, 日本語のテキスト 🙂 \u0301\u2581 ok", False),
    ("<|im_start|>user\nhi<|im_end|><s></s><bos><eos><|endoftext|><unk> x", True),
]


def exercise_reader(path: str, core) -> None:
    """Touches every value and every tensor byte, so a bad pointer would fault here."""
    f = core.GgufFile(path)
    f.metadata()
    getters = (f.get_int, f.get_string, f.get_string_array, f.get_int_array, f.get_float_array,
               f.array_size, lambda k: f.get_float(k, 0.0), lambda k: f.get_bool(k, False))
    for key in f.keys():
        for getter in getters:
            try:
                getter(key)
            except core.ModelFormatError:
                pass  # wrong type for this getter: expected
    for t in f.tensors():
        data = f.tensor_data(t["name"])
        if data.size:
            int(data.sum())


def exercise_model(path: str, stage: list) -> None:
    """The whole load path and one step of each thing a user does next; `stage` says where it is."""
    from edgeinfer import Model

    stage[0] = "load"
    model = Model.load(path, n_ctx=64, n_threads=1)
    ids = []
    for text, parse_special in TEXTS:
        stage[0] = "tokenize"
        ids = model.tokenize(text, parse_special=parse_special)
        stage[0] = "detokenize"
        model.detokenize(ids)
        model.detokenize(ids, special=True)
    stage[0] = "decode"
    model.eval_logits((ids + [0, 0])[:2])
    stage[0] = "chat"
    model.chat_prompt([{"role": "user", "content": "hi"}])


def main() -> None:
    mode, limit = sys.argv[1], int(sys.argv[2])
    if limit:  # 0: none (an AddressSanitizer build reserves terabytes of address space)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from edgeinfer import _core
    from edgeinfer.errors import EdgeInferError

    for variant_id, path in json.load(sys.stdin):
        stage = ["open"]
        try:
            if mode == "reader":
                exercise_reader(path, _core)
            else:
                exercise_model(path, stage)
            result = {"outcome": "ok", "stage": "", "type": "", "message": ""}
        except BaseException as e:  # noqa: BLE001 -- sorting every exception is the point
            if isinstance(e, _core.ModelFormatError):
                outcome = "format_error"
            elif isinstance(e, EdgeInferError) or type(e) is ValueError:
                outcome = "error"
            else:
                outcome = "other"
            result = {"outcome": outcome, "stage": stage[0], "type": type(e).__name__, "message": str(e)}
        print(json.dumps({"id": variant_id, **result}), flush=True)


if __name__ == "__main__":
    main()
