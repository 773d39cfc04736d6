"""llama.cpp side of scripts/compare_logits_llamacpp.py, run by the bench venv's Python (imports
only llama_cpp). Reads one JSON request on stdin:

  {"model": PATH, "n_threads": T, "prompts": [[ids...], ...], "top_k": K}

and prints, for each prompt, the ids and logits of the K largest logits at its last position,
after one llama_decode of the whole prompt from an empty KV cache (as the fixtures were made).
"""
import ctypes
import json
import sys

import llama_cpp as L


def main():
    req = json.load(sys.stdin)
    quiet = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(quiet, ctypes.c_void_p())
    L.llama_backend_init()
    model = L.llama_model_load_from_file(req["model"].encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llama.cpp could not load {req['model']}")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = req["n_threads"]
    ctx = L.llama_init_from_model(model, cp)
    results = []
    for ids in req["prompts"]:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        arr = (L.llama_token * len(ids))(*ids)
        if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids))) != 0:
            sys.exit("llama_decode failed")
        row = L.llama_get_logits_ith(ctx, -1)
        logits = [row[i] for i in range(n_vocab)]
        top = sorted(range(n_vocab), key=lambda i: -logits[i])[: req["top_k"]]
        results.append({"ids": top, "logits": [logits[i] for i in top]})
    json.dump({"system_info": L.llama_print_system_info().decode(), "results": results}, sys.stdout)
    L.llama_free(ctx)
    L.llama_model_free(model)
    del quiet


if __name__ == "__main__":
    main()
