"""Child process of the GGUF fuzz test (tests/test_gguf_fuzz.py).

Reads a JSON list of [id, path] from stdin, limits its own address space, then opens each file
with _core.GgufFile and exercises everything a caller can reach (metadata, typed getters, every
tensor's bytes). Prints one JSON line per file as soon as it is done, so that if the process dies
the parent knows which variant was running:
    {"id": 17, "outcome": "ok" | "format_error" | "other", "detail": "..."}
Only "ok" and "format_error" are acceptable; "other" (e.g. MemoryError, KeyError) or a missing
line (a crash or hang) fails the test.
"""
import json
import resource
import sys


def exercise(f, core) -> None:
    """Touches every value and every tensor byte, so a bad pointer would fault here."""
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


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from edgeinfer import _core

    for variant_id, path in json.load(sys.stdin):
        try:
            exercise(_core.GgufFile(path), _core)
            result = {"outcome": "ok", "detail": ""}
        except _core.ModelFormatError as e:
            result = {"outcome": "format_error", "detail": str(e)}
        except BaseException as e:  # noqa: BLE001 -- anything else is what we are looking for
            result = {"outcome": "other", "detail": f"{type(e).__name__}: {e}"}
        print(json.dumps({"id": variant_id, **result}), flush=True)


if __name__ == "__main__":
    main()
