#!/usr/bin/env python3
"""Parallel requests against a server: aggregate decode speed with 1, 2, 4, 8 concurrent streams,
and the time to first token of a request that arrives while the others stream.

    python scripts/bench_parallel.py MODEL.gguf [--streams 1,2,4,8] [--llama-server PATH]

Starts `edgeinfer serve MODEL --parallel P` (P = the most streams asked for) and, with
--llama-server, llama.cpp's server on the same file with as many slots (`-np P`, each slot the
same context), one after the other, never side by side. edgeinfer runs with --no-speculative
(llama-server does not guess tokens by default; --speculative keeps edgeinfer's prompt lookup on,
which makes repetitive answers faster and so is not the same work). Each stream is a /v1/completions request
of its own prompt (distinct, so no prompt is served from another's cache), greedy, with the
end-of-generation tokens banned by logit_bias so that every stream decodes exactly --tokens
tokens. The client is one asyncio loop (httpx), the same for both servers.

Per stream count S, over --rounds rounds (median reported):
- aggregate tok/s: S x tokens / the time from sending the requests to the last one's end
  (prefills included, as a user of S parallel requests sees it);
- decode tok/s: the sum over streams of (tokens - 1) / (last piece - first piece);
- late TTFT: S - 1 streams running, one more request sent once they all stream: its time to
  first token (S = 1: a lone request's).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgeinfer.machine import machine_summary  # noqa: E402

TOPICS = ["a lighthouse keeper", "a city under the sea", "the first train across a desert", "a robot gardener",
          "a library that never closes", "two rival bakers", "a comet seen by a child", "a forgotten violin",
          "a mountain village in winter", "a ship's cat"]


def prompt_for(i: int, round_no: int) -> str:
    return (f"Story {round_no}-{i}. Write a long, detailed story about {TOPICS[i % len(TOPICS)]}. "
            f"Describe the place, the people and what happens to them, chapter by chapter.\n\nChapter 1.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, argv: list[str], port: int, log: Path):
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{name} exited at start-up; see {log}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{name} did not become healthy; see {log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


async def one_stream(client: httpx.AsyncClient, url: str, prompt: str, tokens: int, ban: dict,
                     streaming: asyncio.Event | None = None) -> dict:
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True, "logit_bias": ban}
    sent = time.perf_counter()
    times: list[float] = []
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise SystemExit(f"a stream failed: {chunk['error']}")
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    times.append(time.perf_counter())
                    if streaming is not None and len(times) == 1:
                        streaming.set()
    finally:
        if streaming is not None:
            streaming.set()   # a stream that ends without text must not leave the late request waiting
    if not times:
        raise SystemExit("a stream ended without text")
    return {"sent": sent, "first": times[0], "last": times[-1], "pieces": len(times)}


async def measure(url: str, streams: int, tokens: int, ban: dict, round_no: int) -> dict:
    async with httpx.AsyncClient(timeout=600) as client:
        t0 = time.perf_counter()
        runs = await asyncio.gather(*(one_stream(client, url, prompt_for(i, round_no), tokens, ban)
                                      for i in range(streams)))
        wall = time.perf_counter() - t0
        # A late request: the others already streaming.
        started = [asyncio.Event() for _ in range(streams - 1)]
        others = [asyncio.create_task(one_stream(client, url, prompt_for(i, round_no + 100), tokens, ban, started[i]))
                  for i in range(streams - 1)]
        for e in started:
            await e.wait()
        late = await one_stream(client, url, prompt_for(streams, round_no + 200), 4, ban)
        await asyncio.gather(*others)
    decode = sum((tokens - 1) / (r["last"] - r["first"]) for r in runs if r["last"] > r["first"])
    return {"aggregate_tok_s": streams * tokens / wall, "decode_tok_s": decode,
            "late_ttft_ms": (late["first"] - late["sent"]) * 1e3}


def eog_ban(model_path: Path) -> dict:
    from edgeinfer import _core
    vocab = _core.Model(os.fsencode(model_path)).vocab
    return {str(t): -100 for t in vocab.eog_ids}


def run_engine(server: Server, counts: list[int], tokens: int, rounds: int, ban: dict) -> dict:
    out = {}
    asyncio.run(measure(server.url, 1, 8, ban, 999))   # warm-up
    for s in counts:
        results = [asyncio.run(measure(server.url, s, tokens, ban, r)) for r in range(rounds)]
        out[s] = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"  {server.name:9s} {s} stream(s): {out[s]['aggregate_tok_s']:7.1f} tok/s aggregate, "
              f"{out[s]['decode_tok_s']:7.1f} decode, late TTFT {out[s]['late_ttft_ms']:7.1f} ms", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="+", type=Path)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per stream (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot (default: %(default)s)")
    ap.add_argument("--llama-server", type=Path, help="llama.cpp's llama-server binary, to run side by side")
    ap.add_argument("--speculative", action="store_true", help="keep edgeinfer's speculative decoding on")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    counts = [int(c) for c in args.streams.split(",")]
    slots = max(counts)
    print(machine_summary(), flush=True)
    report: dict = {"machine": machine_summary(), "tokens": args.tokens, "threads": args.threads, "models": {}}
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    for model in args.model:
        print(f"{model.name}:", flush=True)
        ban = eog_ban(model)
        engines = [("edgeinfer", [sys.executable, "-m", "edgeinfer", "serve", str(model), "--parallel", str(slots),
                                  "-c", str(args.ctx), "-t", str(args.threads)]
                     + ([] if args.speculative else ["--no-speculative"]))]
        if args.llama_server:
            engines.append(("llama.cpp", [str(args.llama_server), "-m", str(model), "-np", str(slots),
                                          "-c", str(args.ctx * slots), "-t", str(args.threads),
                                          "-tb", str(args.threads), "--no-webui"]))
        report["models"][model.name] = {}
        for name, argv in engines:
            port = free_port()
            flag = ["--port", str(port)]
            server = Server(name, argv + flag, port, logs / f"bench_parallel_{name}.log")
            try:
                report["models"][model.name][name] = run_engine(server, counts, args.tokens, args.rounds, ban)
            finally:
                server.stop()
        res = report["models"][model.name]
        one = res["edgeinfer"][counts[0]]["aggregate_tok_s"]
        for s in counts:
            line = f"  {s} streams: edgeinfer {res['edgeinfer'][s]['aggregate_tok_s'] / one:.2f}x its 1-stream tok/s"
            if "llama.cpp" in res:
                line += f", {res['edgeinfer'][s]['aggregate_tok_s'] / res['llama.cpp'][s]['aggregate_tok_s']:.2f}x llama.cpp"
            print(line)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
