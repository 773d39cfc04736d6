"""Compare the decode speed of two edgeinfer builds on a noisy host.

    python scripts/ab_builds.py BASE_DIR NEW_DIR MODEL.gguf [-t 2] [--rounds 40] [-n 64] [-d 1024]
                                [--kv q8_0] [--base-env NAME=VALUE] [--new-env NAME=VALUE]

BASE_DIR and NEW_DIR each hold an `edgeinfer` package with its built extension (a copy of the
checkout's `edgeinfer/` after `python setup.py build_ext --inplace`). Each build runs in a process
of its own that loads the model once and keeps its context; the two then decode bursts of N
single tokens in turn (from depth D, the first one alternating), and the figure is the median of
the per-pair ratios new / base.

Why not two `edgeinfer bench` runs: on a shared VM the machine's speed drifts by ±20 % over
minutes, more than the changes worth measuring. Bursts a second apart see the same host, and a
median over many pairs shrugs off the bursts another tenant spoiled. `--base-env` sets a variable
in the base process only (one build, a switch under test).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path


def serve(build_dir: str, model_path: str, threads: int, depth: int, n_max: int, kv: str | None) -> None:
    """The worker side: answers each line "N" on stdin with the ns of N decode steps from depth."""
    import edgeinfer

    # An installed edgeinfer (pip install -e) is importable from anywhere: a folder without a
    # build would otherwise measure that one under the folder's name.
    imported = Path(edgeinfer.__file__).resolve().parent
    if not imported.is_relative_to(Path(build_dir).resolve()):
        sys.exit(f"the build in {build_dir} did not start: edgeinfer was imported from {imported} "
                 f"(is there an edgeinfer/ package with its built extension in {build_dir}?)")
    from edgeinfer import _core
    from edgeinfer.bench import make_token_ids, time_generation

    try:
        model = _core.Model(model_path)
        kv_types = {"type_k": kv, "type_v": kv} if kv else {}
        ctx = _core.Context(model, n_ctx=depth + n_max, n_threads=threads, n_batch=512, **kv_types)
        ids = make_token_ids(depth + n_max, model.n_vocab)
        if depth:
            ctx.decode(ids[:depth])
    except (_core.EdgeInferError, OSError, ValueError) as e:
        sys.exit(f"ab_builds.py ({build_dir}): {e}")
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        try:
            ns = time_generation(ctx, ids[depth:depth + n], depth)
        except _core.EdgeInferError as e:
            sys.exit(f"ab_builds.py ({build_dir}): {e}")
        print(ns, flush=True)


def start(build_dir: str, env_setting: str | None, args: argparse.Namespace) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(build_dir), PYTHONSAFEPATH="1")
    if env_setting:
        name, _, value = env_setting.partition("=")
        env[name] = value
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", args.model, "--build", build_dir, "-t", str(args.threads),
           "-d", str(args.depth), "-n", str(args.n)] + (["--kv", args.kv] if args.kv else [])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    if proc.stdout.readline().strip() != "ready":
        proc.wait()
        sys.exit(f"the build in {build_dir} did not start (its error is above)")
    return proc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="*", help="BASE_DIR NEW_DIR MODEL.gguf")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=40, help="pairs of bursts")
    p.add_argument("-n", type=int, default=64, help="decode steps per burst")
    p.add_argument("-d", "--depth", type=int, default=0, help="cached positions before the bursts")
    p.add_argument("--kv", help="KV cache type for K and V (f16, q8_0, q4_0)")
    p.add_argument("--base-env", help="NAME=VALUE set for the base process only")
    p.add_argument("--new-env", help="NAME=VALUE set for the new process only")
    p.add_argument("--serve", help=argparse.SUPPRESS)
    p.add_argument("--build", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve(args.build, args.serve, args.threads, args.depth, args.n, args.kv)
    if len(args.dirs) != 3:
        p.error("give BASE_DIR NEW_DIR MODEL.gguf")
    if args.rounds < 1 or args.n < 1 or args.depth < 0 or args.threads < 1:
        p.error("--rounds, -n and -t must be at least 1, -d at least 0")
    for setting in (args.base_env, args.new_env):
        name, equals, _ = (setting or "").partition("=")
        if setting is not None and not (name and equals):
            p.error(f"--base-env / --new-env take NAME=VALUE, not {setting!r}")
    base_dir, new_dir, args.model = args.dirs
    procs = {"base": start(base_dir, args.base_env, args), "new": start(new_dir, args.new_env, args)}
    rates: dict[str, list[float]] = {"base": [], "new": []}
    try:
        for r in range(args.rounds):
            for name in ("base", "new") if r % 2 == 0 else ("new", "base"):
                proc = procs[name]
                proc.stdin.write(f"{args.n}\n")
                proc.stdin.flush()
                answer = proc.stdout.readline().strip()
                if not answer:
                    sys.exit(f"the {name} build stopped (its error is above)")
                rates[name].append(args.n / (int(answer) / 1e9))
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    base, new = rates["base"], rates["new"]
    ratios = [b / a for a, b in zip(base, new)]
    print(f"tok/s median: base {statistics.median(base):.1f}, new {statistics.median(new):.1f}; "
          f"paired ratio new/base {statistics.median(ratios):.3f} "
          f"({args.rounds} pairs of {args.n} steps, depth {args.depth}, {args.threads} threads"
          f"{', KV ' + args.kv if args.kv else ''})")


if __name__ == "__main__":
    main()
