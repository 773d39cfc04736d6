"""Builds the private extension `edgeinfer._core` from native/.

Kernels for each instruction set live in their own translation units (native/src/cpu/<arch>/<isa>.cpp)
and are compiled with that instruction set's flags; everything else is compiled for the baseline
target, so one build runs on any x86-64 (or ARM64) machine and picks its kernels at run time.
"""
import os
import platform
import subprocess
import sys
from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup
from setuptools.modified import newer_group

ParallelCompile("EDGEINFER_BUILD_JOBS", default=0).install()

MACHINE = platform.machine().lower()
IS_X86 = MACHINE in ("x86_64", "amd64", "i686", "x86")
IS_ARM64 = MACHINE in ("aarch64", "arm64")

# EDGEINFER_EMULATE_AVX512=1: see AVX512_FLAGS below. Never for a build anyone runs for speed.
EMULATE_AVX512 = os.environ.get("EDGEINFER_EMULATE_AVX512") == "1"

# Per-ISA translation units and the flags each is compiled with.
ISA_SOURCES = {}
if IS_X86:
    AVX2_FLAGS = ["-mavx2", "-mfma", "-mf16c"]
    AVX512_FLAGS = AVX2_FLAGS + ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni"]
    if EMULATE_AVX512:
        # A test build (scripts/test_avx512_emulated.sh): the AVX-512 units' intrinsics become
        # SIMDe's portable ones, so their bits can be checked on a CPU without AVX-512.
        AVX512_FLAGS = AVX2_FLAGS + ["-include", "native/tests/avx512_emulation/avx512_emulated.h"]
    # The float-op units mirror ggml, whose sources are built in GNU dialects where GCC
    # contracts a*b+c into FMA; -std=c++17 (ISO) would turn that off.
    FP_CONTRACT = ["-ffp-contract=fast"]
    ISA_SOURCES["native/src/cpu/x86/avx2.cpp"] = AVX2_FLAGS
    ISA_SOURCES["native/src/cpu/x86/avx512.cpp"] = AVX512_FLAGS
    ISA_SOURCES["native/src/cpu/x86/ops_avx2.cpp"] = AVX2_FLAGS + FP_CONTRACT
    ISA_SOURCES["native/src/cpu/x86/ops_avx512.cpp"] = AVX512_FLAGS + FP_CONTRACT
    ISA_SOURCES["native/src/cpu/x86/attn_kvq_fma.cpp"] = AVX2_FLAGS + FP_CONTRACT
    # No contraction (GCC fuses a*b+c in C++ whatever -std says): its results must equal the
    # scalar reference's bit for bit.
    ISA_SOURCES["native/src/cpu/x86/attn_kvq_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    # Like avx512.cpp (whose vec_dots it must match bit for bit): explicit FMAs only.
    ISA_SOURCES["native/src/cpu/x86/gemm_avx512.cpp"] = AVX512_FLAGS
    ISA_SOURCES["native/src/cpu/x86/gemm_kquants_avx512.cpp"] = AVX512_FLAGS
    # Like gemm_packed_avx2.cpp (whose bits it must give): explicit FMAs only.
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_avx512.cpp"] = AVX512_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_q236k_avx512.cpp"] = AVX512_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_iq4xs_avx512.cpp"] = AVX512_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_q45k_avx512.cpp"] = AVX512_FLAGS + ["-ffp-contract=off"]
    # Like avx2.cpp (whose vec_dots they must match bit for bit: the tiled GEMM, the packed Q4_1
    # GEMV): explicit FMAs only.
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_q236k_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_iq4xs_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_packed_q45k_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/gemm_kquants_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/attn_prefill_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    ISA_SOURCES["native/src/cpu/x86/attn_span_f16_avx2.cpp"] = AVX2_FLAGS + ["-ffp-contract=off"]
    # Gives the AVX2 kernel's bits: explicit FMAs only.
    ISA_SOURCES["native/src/cpu/x86/attn_prefill_avx512.cpp"] = AVX512_FLAGS + ["-ffp-contract=off"]
elif IS_ARM64:
    ISA_SOURCES["native/src/cpu/arm/neon.cpp"] = ["-march=armv8.2-a+dotprod+fp16"]

ISA_DEFINES = {
    "native/src/cpu/x86/avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/ops_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/ops_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/attn_kvq_fma.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/attn_kvq_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/gemm_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/gemm_kquants_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/gemm_packed_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/gemm_packed_q236k_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/gemm_packed_iq4xs_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/gemm_packed_q45k_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/x86/gemm_packed_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/gemm_packed_q236k_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/gemm_packed_iq4xs_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/gemm_packed_q45k_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/gemm_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/gemm_kquants_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/attn_prefill_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/attn_span_f16_avx2.cpp": "EDGEINFER_HAVE_AVX2",
    "native/src/cpu/x86/attn_prefill_avx512.cpp": "EDGEINFER_HAVE_AVX512",
    "native/src/cpu/arm/neon.cpp": "EDGEINFER_HAVE_NEON",
}

ALL_ISA_FILES = set(ISA_DEFINES)
# The core itself (native/src): compiled once, linked into both extensions.
core_sources = sorted(f for f in glob("native/src/**/*.cpp", recursive=True) if f not in ALL_ISA_FILES)
CORE_HEADERS = sorted(glob("native/src/**/*.h", recursive=True))
BINDING_HEADERS = sorted(glob("native/bindings/**/*.h", recursive=True))
if EMULATE_AVX512:
    CORE_HEADERS += sorted(glob("native/tests/avx512_emulation/*.h"))
isa_sources = [f for f in ISA_SOURCES if os.path.exists(f)]

# The OpenCL kernels (native/src/gpu/kernels/*.cl) and the block layouts they read (generated from
# native/src/quant/blocks.h) are compiled into the core as a generated header; see the script.
GENERATED_DIR = "build/generated"
KERNEL_SOURCES_INC = os.path.join(GENERATED_DIR, "gpu", "kernel_sources.inc")
subprocess.run([sys.executable, "native/src/gpu/embed_kernels.py", KERNEL_SOURCES_INC], check=True)

# -g0: no debug info in the product (Python's own CFLAGS carry -g); the ISA units get these too.
COMMON_FLAGS = ["-O3", "-g0", "-fvisibility=hidden", "-fno-math-errno", "-Wall", "-Wno-unused-function"]


class BuildSharedCore(build_ext):
    """Compiles native/src once (each ISA unit with its own flags) and links those objects into both
    extensions, each of which adds only its own bindings."""

    def finalize_options(self):
        # The core's objects stay in the tree (editable installs would otherwise build in a
        # temporary folder), so a rebuild compiles only what changed and
        # scripts/test_avx512_emulated.sh can start from them.
        if EMULATE_AVX512 and (self.inplace or self.build_temp is None or self.build_lib is None):
            # Its objects and extensions must never mix with the product's.
            raise SystemExit("EDGEINFER_EMULATE_AVX512=1 builds need --build-lib and --build-temp folders of "
                             "their own (scripts/test_avx512_emulated.sh)")
        if self.build_temp is None:
            self.build_temp = os.path.join("build", "temp.core")
        super().finalize_options()

    def build_extensions(self):
        core_ext = self.extensions[0]
        self._compile_changed_only()
        objects = self.compiler.compile(
            core_sources,
            output_dir=self.build_temp,
            macros=core_ext.define_macros,
            include_dirs=core_ext.include_dirs,
            extra_postargs=["-fPIC"] + core_ext.extra_compile_args,
        )
        # One call per set of flags, so that ParallelCompile spreads each over the jobs.
        by_flags = {}
        for src in isa_sources:
            by_flags.setdefault(tuple(ISA_SOURCES[src]), []).append(src)
        for isa_flags, sources in by_flags.items():
            objects += self.compiler.compile(
                sources,
                output_dir=self.build_temp,
                include_dirs=core_ext.include_dirs,
                extra_postargs=["-std=c++17", "-fPIC"] + COMMON_FLAGS + list(isa_flags),
            )
        if any(newer_group(objects, self.get_ext_fullpath(ext.name), "newer") for ext in self.extensions):
            self.force = True  # new core objects: relink both extensions
        for ext in self.extensions:
            ext.extra_objects = list(ext.extra_objects or []) + objects
        super().build_extensions()
        with open(self._settings_stamp(), "w") as f:
            f.write(self._settings)

    def _settings_stamp(self):
        return os.path.join(self.build_temp, "compile_settings.txt")

    def _compile_changed_only(self):
        """Makes the compiler skip a unit whose object is newer than its source, every header (no
        per-unit include tracking: a changed header recompiles every unit), the OpenCL kernels and
        this file; --force, or compiler settings from the environment that differ from the last
        build's (a sanitizer build in the same folder), compile all."""
        settings = {k: os.environ.get(k, "") for k in ("CC", "CXX", "CFLAGS", "CPPFLAGS", "CXXFLAGS")}
        self._settings = repr(sorted(settings.items()) + [("python", sys.version)])
        previous = open(self._settings_stamp()).read() if os.path.exists(self._settings_stamp()) else None
        compile_all = self.force or previous != self._settings
        if compile_all and previous is not None:
            os.remove(self._settings_stamp())  # written again once every unit compiled
        compile_units = self.compiler.compile
        shared_depends = CORE_HEADERS + BINDING_HEADERS + [KERNEL_SOURCES_INC, "setup.py"]

        def compile_changed(sources, output_dir=None, **kwargs):
            objects = self.compiler.object_filenames(sources, output_dir=output_dir)
            changed = [src for src, obj in zip(sources, objects)
                       if compile_all or newer_group([src] + shared_depends, obj, "newer")]
            if changed:
                compile_units(changed, output_dir=output_dir, **kwargs)
            return objects

        self.compiler.compile = compile_changed


def extension(name, binding_folder):
    return Pybind11Extension(
        name,
        sorted(glob(f"native/bindings/{binding_folder}/*.cpp")),
        include_dirs=["native/src", "native/bindings", GENERATED_DIR],
        define_macros=sorted({(ISA_DEFINES[f], "1") for f in isa_sources}
                             | ({("EDGEINFER_AVX512_EMULATED", "1")} if EMULATE_AVX512 else set())),
        extra_compile_args=list(COMMON_FLAGS),  # Pybind11Extension prepends its flags in place
        cxx_std=17,
        # The core is compiled by hand (BuildSharedCore), which build_ext does not track: list its
        # sources and headers so that editing one rebuilds the extensions.
        depends=core_sources + isa_sources + CORE_HEADERS + BINDING_HEADERS + [KERNEL_SOURCES_INC],
    )


import pybind11  # noqa: E402  (include path for the core sources compiled by hand)

# edgeinfer._core is the product; edgeinfer._testing holds the entry points only tests use (one
# kernel, op or device op per call), so the product carries none of them.
extensions = [extension("edgeinfer._core", "core"), extension("edgeinfer._testing", "testing")]
for ext in extensions:
    ext.include_dirs.append(pybind11.get_include())

setup(ext_modules=extensions, cmdclass={"build_ext": BuildSharedCore})
