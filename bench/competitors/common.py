"""Helpers the competitor scripts share."""
import gzip
import time

import numpy as np


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
