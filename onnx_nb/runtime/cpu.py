"""The CPU a file runs on, as ONNX Runtime's kernels see it: which instruction set its INT8 products take, and whether
they saturate.

ONNX Runtime (MLAS) multiplies INT8 activations (uint8) by INT8 weights (int8) with ``vpmaddubsw`` on x86 CPUs
with AVX2 or AVX-512 but no VNNI: two products are added into a signed 16-bit lane first, which saturates when both
are large (255 x 127 x 2 > 32767). With VNNI (AVX-512 VNNI, AVX-VNNI), AMX, and on Arm (dot product, i8mm) the
products accumulate in 32 bits and nothing saturates. ONNX Runtime's documentation gives the two ways out on the
saturating CPUs: weights in 7 bits (``reduce_range``) or uint8 weights (U8U8, another kernel). Which one a file
takes is therefore part of its recipe, for the CPU it will run on (:func:`target`), and a file made for one kind
opened on the other says so (:func:`mismatch`).

Features are read the way ONNX Runtime reads them, from CPUID (numpy's runtime dispatch table: what the process
really executes, an emulator's CPU included), with the flags numpy does not list (AVX-VNNI, AMX, Arm's i8mm) from
``/proc/cpuinfo``.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgumentError

# metadata written into an INT8 file: the scheme it holds and the CPU it was made for
SCHEME_KEY = "onnx_nb.int8_scheme"
TARGET_KEY = "onnx_nb.int8_target"

SCHEMES = {  # name -> (ORT weight type, reduce_range), what it means
    "u8s8": ("int8", False, "uint8 activations x int8 weights, full range (the fast path with VNNI, AMX or Arm)"),
    "u8s8-reduced": ("int8", True, "uint8 activations x int8 weights in 7 bits (reduce_range): the u8s8 kernel "
                     "without its 16-bit saturation on AVX2 / AVX-512 CPUs without VNNI"),
    "u8u8": ("uint8", False, "uint8 activations x uint8 weights: another kernel, which never saturates"),
}


@dataclass(frozen=True)
class Cpu:
    """A CPU as its INT8 kernels see it. ``kernel`` names the instruction set ONNX Runtime's u8s8 products take;
    ``saturates``: they add pairs of products in 16 bits (x86 AVX2 / AVX-512 without VNNI)."""

    arch: str  # "x86_64", "arm64", or "any" for a target named without a machine
    name: str  # the model name, or the target's name
    flags: frozenset[str]  # lower-case: avx2 avx512f avx512bw avx512_vnni avx_vnni amx_int8 asimd asimddp i8mm

    @property
    def kernel(self) -> str:
        f = self.flags
        if self.arch == "arm64":
            return "Arm i8mm" if "i8mm" in f else "Arm dot product" if "asimddp" in f else "Arm NEON"
        if self.arch != "x86_64":
            return "unknown"
        if "amx_int8" in f:
            return "AMX"
        if "avx512_vnni" in f and "avx512bw" in f:
            return "AVX-512 VNNI"
        if "avx_vnni" in f and "avx2" in f:
            return "AVX-VNNI"
        if "avx512bw" in f:
            return "AVX-512 (no VNNI)"
        if "avx2" in f:
            return "AVX2 (no VNNI)"
        return "SSE"

    @property
    def saturates(self) -> bool | None:
        """Whether u8s8 products saturate here (None: a target named without knowing its CPU)."""
        if self.arch == "any":
            return None
        return self.kernel in ("AVX-512 (no VNNI)", "AVX2 (no VNNI)")

    @property
    def here(self) -> bool:
        """This is the CPU this process runs on (a file made for it can be timed here)."""
        return self == this_cpu()

    @property
    def label(self) -> str:
        """e.g. ``AMD EPYC, x86_64 AVX-512 VNNI``: what a table names as the CPU its rows ran on."""
        kind = f"{self.arch} {self.kernel}" if self.arch != "any" else "any CPU"
        return f"{self.name}, {kind}" if self.name and self.name != kind else kind

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "int8_kernel": self.kernel, "saturates": self.saturates,
                "flags": sorted(self.flags)}


# numpy's names for the CPUID features ONNX Runtime dispatches on
_NUMPY = {"AVX2": "avx2", "AVX512F": "avx512f", "AVX512BW": "avx512bw", "AVX512VNNI": "avx512_vnni",
          "ASIMD": "asimd", "ASIMDDP": "asimddp"}
_PROC = ("avx_vnni", "amx_int8", "amx_tile", "i8mm", "asimddp")  # flags only /proc/cpuinfo lists
X86_CPUID = {"avx2", "avx512f", "avx512bw", "avx512_vnni"}  # what both CPUID (numpy) and /proc/cpuinfo list


@functools.lru_cache(maxsize=1)
def this_cpu() -> Cpu:
    """The CPU this process runs on (read once)."""
    machine = platform.machine().lower()
    arch = "x86_64" if machine in ("x86_64", "amd64") else "arm64" if machine in ("arm64", "aarch64") else machine
    flags: set[str] = set()
    import importlib

    try:
        features = importlib.import_module("numpy._core._multiarray_umath").__cpu_features__
    except ImportError:  # numpy 1.x
        features = importlib.import_module("numpy.core._multiarray_umath").__cpu_features__
    flags |= {ours for theirs, ours in _NUMPY.items() if features.get(theirs)}
    name, proc = _proc_cpuinfo()
    flags |= proc_extras(flags, proc)
    if arch == "arm64" and platform.system() == "Darwin":  # Apple silicon: dot product and i8mm from M2 on
        name = name or _sysctl("machdep.cpu.brand_string")
        flags |= {"asimd", "asimddp"} | ({"i8mm"} if _sysctl("hw.optional.arm.FEAT_I8MM") == "1" else set())
    return Cpu(arch, name or platform.processor() or machine, frozenset(flags))


def proc_extras(cpuid: set[str], proc: set[str]) -> set[str]:
    """The flags only ``/proc/cpuinfo`` lists (AVX-VNNI, AMX, i8mm), taken where it describes the CPU this process
    executes on: where it claims a feature CPUID denies (AVX-512 on a host whose emulator offers AVX2 only: qemu-user
    shows the host's ``/proc/cpuinfo``), it describes another CPU and none of its extras are taken."""
    if (proc & X86_CPUID) - cpuid:
        return set()
    return proc & set(_PROC)


def _proc_cpuinfo() -> tuple[str, set[str]]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(200_000)
    except OSError:
        return "", set()
    name, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and not name:
            name = " ".join(value.split())
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return _short(name), flags


def _short(name: str) -> str:
    """``AMD EPYC 9B14 96-Core Processor`` -> ``AMD EPYC 9B14``; ``Intel(R) Xeon(R) ...`` without the marks."""
    for mark in ("(R)", "(TM)", "(tm)", " CPU", " Processor"):
        name = name.replace(mark, "")
    words = [w for w in name.split() if not w.endswith("-Core") and w != "@" and not w.endswith("GHz")]
    return " ".join(words)


def _sysctl(key: str) -> str:
    import subprocess

    try:
        return subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# target_cpu names -> the flags that decide the INT8 kernel on such a CPU
TARGETS = {
    "avx2": ("x86_64", {"avx2"}, "an x86 CPU with AVX2 and no VNNI (AMD Zen 1-3, Intel before Ice Lake)"),
    "avx512": ("x86_64", {"avx2", "avx512f", "avx512bw"}, "AVX-512 without VNNI (Intel Skylake-SP)"),
    "vnni": ("x86_64", {"avx2", "avx512f", "avx512bw", "avx512_vnni"},
             "AVX-512 VNNI or AVX-VNNI (Intel Cascade Lake and later, AMD Zen 4 and later)"),
    "amx": ("x86_64", {"avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_int8"}, "AMX (Intel Sapphire Rapids)"),
    "arm64": ("arm64", {"asimd", "asimddp"}, "Arm64 with the dot product (Graviton 2+, Apple M1+, Ampere)"),
    "any": ("any", set(), "any CPU: a scheme that neither saturates nor loses accuracy on one of them"),
}


def target(target_cpu: str | Cpu | None) -> Cpu:
    """The CPU a file is made for: this machine (None or ``"auto"``), one of :data:`TARGETS`, or a :class:`Cpu`."""
    if isinstance(target_cpu, Cpu):
        return target_cpu
    if target_cpu in (None, "auto", "this", "native"):
        return this_cpu()
    key = str(target_cpu).lower().replace("-", "").replace("_", "")
    aliases = {"avx512vnni": "vnni", "avxvnni": "vnni", "x86": "avx2", "aarch64": "arm64", "arm": "arm64",
               "portable": "any"}
    key = aliases.get(key, key)
    if key not in TARGETS:
        raise InvalidArgumentError(
            f"target_cpu={target_cpu!r}: name the CPU the file will run on: 'auto' (this machine, "
            f"{this_cpu().label}), {', '.join(repr(k) for k in TARGETS)}.")
    arch, flags, _ = TARGETS[key]
    return Cpu(arch, key, frozenset(flags))


def schemes_for(cpu: Cpu) -> tuple[list[str], str]:
    """The INT8 schemes that serve ``cpu`` (best first; more than one: measure them) and why."""
    if cpu.saturates is None:
        return ["u8u8"], ("for any CPU: uint8 weights (U8U8) never saturate, and keep all 8 bits where reduce_range "
                          "would drop one on CPUs with VNNI")
    if cpu.saturates:
        return ["u8u8", "u8s8-reduced"], (
            f"{cpu.kernel}: u8s8 products saturate in 16 bits (vpmaddubsw); ONNX Runtime's two ways out, uint8 "
            "weights (U8U8: all 8 bits, another kernel) or weights in 7 bits (reduce_range: the u8s8 kernel), "
            "whichever runs faster within the accuracy policy")
    return ["u8s8"], f"{cpu.kernel}: u8s8 products accumulate in 32 bits, full range is exact and fastest"


def mismatch(metadata: dict[str, str], cpu: Cpu | None = None) -> str:
    """A note when an INT8 file's scheme does not serve ``cpu`` (default: this one), else ''."""
    scheme = metadata.get(SCHEME_KEY)
    if scheme not in SCHEMES:
        return ""
    cpu = cpu or this_cpu()
    made_for = metadata.get(TARGET_KEY, "another CPU")
    if scheme == "u8s8" and cpu.saturates:
        return (f"This INT8 file was made for {made_for} (u8s8, full range); on this CPU ({cpu.label}) its u8s8 "
                "products saturate in 16 bits and its errors grow: quantize it again here, or with "
                "target_cpu='avx2' (or 'any') for CPUs without VNNI.")
    if scheme == "u8s8-reduced" and cpu.saturates is False:
        return (f"This INT8 file was made for {made_for} (weights in 7 bits against saturation); this CPU "
                f"({cpu.label}) does not saturate, and a file quantized here keeps all 8 bits.")
    return ""


def file_notes(proto: Any) -> list[str]:
    """:func:`mismatch` for an ONNX model proto, as a list of notes (empty when the file serves this CPU)."""
    note = mismatch({p.key: p.value for p in proto.metadata_props})
    return [note] if note else []
