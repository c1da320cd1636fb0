"""Hardware description shared by every benchmark script.

Benchmarks print this first, so a figure can always be read against the machine that
produced it. Only the standard library and /proc are read: no psutil.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path


def proc_status_kib(field: str, pid: int | str = "self") -> int:
    """One kB field of a process's /proc status (`VmRSS`, `VmHWM`, `RssAnon`, ...), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return None


def _version(distribution: str) -> str | None:
    # Read installed metadata instead of importing: importing torch alone takes seconds.
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def describe_hardware() -> dict:
    """The machine and the numeric stack, as a flat dict of printable values.

    Keys: cpu_model, logical_cpus, usable_cpus (the affinity mask, which containers narrow),
    ram_gib, simd (the popcount/SIMD features relevant to the bit kernels), platform,
    python, numpy, numba, torch (None when a package is not installed).
    """
    flags = _cpu_flags()
    simd = [name for name in ("popcnt", "avx2", "avx512f", "avx512_vpopcntdq", "neon") if name in flags]
    ram = _ram_gib()
    return {
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_gib": round(ram, 1) if ram is not None else None,
        "simd": " ".join(simd) or "unknown",
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "torch": _version("torch"),
    }


def print_hardware() -> None:
    """Print `describe_hardware()` as aligned `key: value` lines under a header."""
    info = describe_hardware()
    print("== hardware ==")
    width = max(len(key) for key in info)
    for key, value in info.items():
        print(f"{key:<{width}} : {value}")
