"""llama.cpp side of scripts/bench_compare.py, run by the bench venv's Python (it imports only
llama_cpp, never edgeinfer). Speaks JSON lines on stdin/stdout:

  {"cmd": "load", "model": PATH, "n_threads": T, "n_ctx": C, "n_batch": B}   -> {"ok": true, "info": ...}
  {"cmd": "pp", "ids": [...]}   one llama_decode of all ids from an empty KV cache  -> {"ns": N}
  {"cmd": "tg", "ids": [...]}   one single-token llama_decode per id, from empty    -> {"ns": N}
  {"cmd": "batch", "prompt": [...], "ids": [...], "reps": R}
                                the fastest of R llama_decode calls of all ids after the prompt
                                is cached, logits for every row (scripts/bench_decode_batch.py)
                                                                                   -> {"ns": N}
  {"cmd": "quit"}

Only the low-level C API is used (llama_batch_get_one + llama_decode), so no tokenizer or sampler
runs, exactly as on the edgeinfer side; llama_batch_get_one asks for the last row's logits only.
"""
import ctypes
import json
import sys
import time

import llama_cpp as L


def _quiet_log():
    cb = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(cb, ctypes.c_void_p())
    return cb  # keep a reference: the callback must outlive every call


class Engine:
    def __init__(self, path, n_threads, n_ctx, n_batch):
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.mem = L.llama_get_memory(self.ctx)

    def _decode(self, ids):
        arr = (L.llama_token * len(ids))(*ids)
        rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(ids)))
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def pp(self, ids):
        L.llama_memory_clear(self.mem, True)
        arr = (L.llama_token * len(ids))(*ids)
        start = time.perf_counter_ns()
        rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(ids)))
        L.llama_synchronize(self.ctx)
        ns = time.perf_counter_ns() - start
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return ns

    def tg(self, ids):
        L.llama_memory_clear(self.mem, True)
        tokens = [(L.llama_token * 1)(i) for i in ids]  # built before the clock starts
        start = time.perf_counter_ns()
        for tok in tokens:
            if L.llama_decode(self.ctx, L.llama_batch_get_one(tok, 1)) != 0:
                raise RuntimeError("llama_decode failed")
        L.llama_synchronize(self.ctx)
        return time.perf_counter_ns() - start

    def batch(self, prompt, ids, reps):
        L.llama_memory_clear(self.mem, True)
        self._decode(prompt)
        n = len(ids)
        batch = L.llama_batch_init(n, 0, 1)
        try:
            for i, tok in enumerate(ids):
                batch.token[i] = tok
                batch.pos[i] = len(prompt) + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = n
            best = None
            for rep in range(reps + 1):  # the first call warms up
                start = time.perf_counter_ns()
                rc = L.llama_decode(self.ctx, batch)
                L.llama_synchronize(self.ctx)
                ns = time.perf_counter_ns() - start
                if rc != 0:
                    raise RuntimeError(f"llama_decode returned {rc}")
                L.llama_memory_seq_rm(self.mem, 0, len(prompt), -1)  # back to the cached prompt
                if rep > 0:
                    best = ns if best is None else min(best, ns)
        finally:
            L.llama_batch_free(batch)
        return best

    def close(self):
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


def main():
    keep = _quiet_log()
    L.llama_backend_init()
    engine = None
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            if msg["cmd"] == "load":
                if engine:
                    engine.close()
                engine = Engine(msg["model"], msg["n_threads"], msg["n_ctx"], msg["n_batch"])
                out = {"ok": True, "system_info": L.llama_print_system_info().decode(),
                       "version": getattr(L, "__version__", "?")}
            elif msg["cmd"] == "pp":
                out = {"ns": engine.pp(msg["ids"])}
            elif msg["cmd"] == "tg":
                out = {"ns": engine.tg(msg["ids"])}
            elif msg["cmd"] == "batch":
                out = {"ns": engine.batch(msg["prompt"], msg["ids"], msg["reps"])}
            elif msg["cmd"] == "quit":
                break
            else:
                out = {"error": f"unknown command {msg['cmd']}"}
        except Exception as exc:  # reported to the driver, which stops
            out = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    if engine:
        engine.close()
    del keep


if __name__ == "__main__":
    main()
