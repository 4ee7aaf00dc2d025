"""Read bandwidth of memory, for the decode bounds of the benchmark scripts: the best of a few
full reads of a buffer with N threads (a small C routine compiled at run time with the
system compiler, -O3 -march=native), of 1 GiB of anonymous memory or of a file mapping.
Needs numpy."""
from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

BW_C = r"""
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
typedef struct { const uint64_t *p; size_t n; uint64_t sum; } job;
static void *rd(void *arg) {
    job *j = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        a += j->p[i]; b ^= j->p[i + 1]; c += j->p[i + 2]; d ^= j->p[i + 3];
    }
    j->sum = a + b + c + d;
    return NULL;
}
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
/* best of `reps` full reads of [p, p + bytes) with `threads` threads, in GB/s */
double read_bw(const void *p, size_t bytes, int threads, int reps) {
    double best = 0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t t[64]; job j[64];
        size_t per = bytes / 8 / (size_t)threads;
        double t0 = now();
        for (int i = 0; i < threads; i++) {
            j[i] = (job){(const uint64_t *)p + per * (size_t)i, per, 0};
            pthread_create(&t[i], NULL, rd, &j[i]);
        }
        for (int i = 0; i < threads; i++) { pthread_join(t[i], NULL); sink += j[i].sum; }
        double gbs = (double)(per * 8 * (size_t)threads) / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}
"""



class Bandwidth:
    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        src = Path(self.dir.name) / "bw.c"
        lib = Path(self.dir.name) / "bw.so"
        src.write_text(BW_C)
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O3", "-march=native", "-shared", "-fPIC", "-pthread", "-o",
                        str(lib), str(src)],
                       check=True)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.read_bw.restype = ctypes.c_double
        self.lib.read_bw.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]

    def _best(self, a: np.ndarray, threads: int) -> float:
        self.lib.read_bw(a.ctypes.data, a.nbytes, threads, 1)  # fault the pages in first
        return self.lib.read_bw(a.ctypes.data, a.nbytes, threads, 5)

    def anon(self, threads: int, nbytes: int = 1 << 30) -> float:
        m = mmap.mmap(-1, nbytes)
        a = np.frombuffer(m, dtype=np.uint8)
        a[:] = 1
        bw = self._best(a, threads)
        del a
        m.close()
        return bw

    def file(self, path: Path, threads: int) -> float:
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        a = np.frombuffer(m, dtype=np.uint8)
        bw = self._best(a, threads)
        del a
        m.close()
        return bw
