"""Helpers the competitor scripts share.

Importing this module first (before torch) gives PyTorch the memory
allocator its CPU performance guides recommend: tcmalloc, preloaded by
re-running the script with LD_PRELOAD when libtcmalloc-minimal4 is
installed. With glibc's malloc, PyTorch's speed depends on an accident:
tensors above the dynamic mmap threshold (128 KiB at start, raised only
when a larger mmapped block is freed) are mmapped and unmapped on every
step and their pages faulted in afresh, which made the MNIST net train
three times slower in one script than in another that happened to free
a 31 MB array first. Without tcmalloc the threshold is pinned at its
maximum (32 MiB) instead. TORCH_ALLOCATOR=glibc keeps glibc's defaults
(to measure them); `allocator` says which one this process runs on.
"""
import ctypes
import gzip
import os
import sys
import time

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"


# _CHOSEN marks a process the OpenBLAS choice below re-ran: its
# OPENBLAS_CORETYPE, set or not, is the one chosen.
_CHOSEN = "GORUN_COMPETITOR_OPENBLAS_CHOSEN"


def _openblas_core():
    """The kernel set OpenBLAS picks on this CPU, as its own name for it.

    OpenBLAS 0.3.21 (Debian 12) does not know CPUs newer than itself by
    family and model (Intel family 6 model 207 — Emerald Rapids — among
    them) and falls back to "Prescott", its generic SSE3 kernels: SGEMM at
    a quarter of the speed the CPU's AVX-512 gives. When it does, and the
    caller has not chosen (COMPETITOR_OPENBLAS_CORETYPE), this re-runs the script
    with the kernels the CPU's flags allow, so that PyTorch and NumPy are
    measured at their best; the name returned says which ran.

    An OPENBLAS_CORETYPE in the environment is not taken for the caller's
    choice: a machine may set one for every program (this project's VM
    sets Haswell, which held OpenBLAS's AVX-512 kernels back on an AVX-512
    host: one-thread SGEMM at 77–101 GFLOP/s against 135–194). The script
    is re-run without it, so that OpenBLAS detects the CPU itself; a
    caller that wants given kernels sets COMPETITOR_OPENBLAS_CORETYPE.
    """
    rerun = sys.argv and sys.argv[0].endswith(".py") and not os.environ.get(_CHOSEN)
    want = os.environ.get("COMPETITOR_OPENBLAS_CORETYPE") or None
    if rerun and os.environ.get("OPENBLAS_CORETYPE") != want:
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        if want:
            env["OPENBLAS_CORETYPE"] = want
        env[_CHOSEN] = "1"
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    try:
        lib = ctypes.CDLL(OPENBLAS)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return "unknown"
    want = os.environ.get("COMPETITOR_OPENBLAS_CORETYPE")
    if want and core.lower() != want.lower():
        print("COMPETITOR_OPENBLAS_CORETYPE=%r: OpenBLAS does not know it and runs its %s kernels" % (want, core), file=sys.stderr)
    if "OPENBLAS_CORETYPE" in os.environ or core.lower() != "prescott":
        return core  # the caller's choice, or OpenBLAS knows this CPU
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return core
    for flag, better in (("avx512f", "SkylakeX"), ("avx2", "Haswell")):
        if flag in flags and sys.argv and sys.argv[0].endswith(".py"):
            sys.stdout.flush()
            os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, OPENBLAS_CORETYPE=better, **{_CHOSEN: "1"}))
    return core


openblas_core = _openblas_core()


def _choose_allocator():
    want = os.environ.get("TORCH_ALLOCATOR") or "best"  # set but empty: the default
    if want not in ("best", "glibc"):
        sys.exit("TORCH_ALLOCATOR=%r: want best or glibc" % want)
    if want == "glibc":
        return "glibc malloc (defaults)"
    if "tcmalloc" in os.environ.get("LD_PRELOAD", ""):
        return "tcmalloc"
    if os.path.exists(TCMALLOC) and sys.argv and sys.argv[0].endswith(".py"):
        env = dict(os.environ, LD_PRELOAD=(TCMALLOC + " " + os.environ.get("LD_PRELOAD", "")).strip())
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(M_TRIM_THRESHOLD, 64 << 20)
    return "glibc malloc, mmap threshold 32 MiB (apt-get install libtcmalloc-minimal4 for tcmalloc)"


allocator = _choose_allocator()

import numpy as np  # noqa: E402


def timeit(fn, min_time=1.0):
    """Seconds per call of fn, after one warm-up call, over at least min_time."""
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n


def idx(path):
    """An MNIST-format (IDX, gzipped) file as a uint8 array."""
    with gzip.open(path) as f:
        b = f.read()
    ndim = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def one_interface():
    """The host's one network interface besides lo, for gloo's
    GLOO_SOCKET_IFNAME across hosts (gloo otherwise binds to the address
    the host name resolves to, 127.0.0.1 in a network namespace)."""
    names = [n for n in os.listdir("/sys/class/net") if n != "lo"]
    if len(names) != 1:
        sys.exit("%s: this host has interfaces %s besides lo: set GLOO_SOCKET_IFNAME" % (os.path.basename(sys.argv[0]), names))
    return names[0]
