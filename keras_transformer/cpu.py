"""What the CPU can do, from /proc/cpuinfo: the choices that depend on it (bfloat16's warning, the
decoder's layout of its matrix products) read it here."""
import functools
import pathlib


@functools.lru_cache(maxsize=1)
def _proc_cpuinfo():
    """/proc/cpuinfo's text, read once per process (every trace of a decoder asks), or None."""
    path = pathlib.Path("/proc/cpuinfo")
    return path.read_text(errors="replace") if path.is_file() else None


def cpu_flags(cpuinfo_text=None):
    """The feature flags of the first CPU in /proc/cpuinfo (or of cpuinfo_text); None if unknown."""
    if cpuinfo_text is None:
        cpuinfo_text = _proc_cpuinfo()
        if cpuinfo_text is None:
            return None
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, Arm
            return set(value.split())
    return None


def avx2_without_avx512(cpuinfo_text=None):
    """True on an x86 CPU with AVX2 and no AVX-512 (AMD Zen 2 and 3, Intel before Skylake-SP and
    most of its desktop parts); False elsewhere or when the flags cannot be read."""
    flags = cpu_flags(cpuinfo_text)
    return flags is not None and "avx2" in flags and "avx512f" not in flags
