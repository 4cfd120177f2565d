"""The memory guard of dense inference: how many bytes the host may still allocate, and a
clear error before dense EP would need more n x n matrices than fit; and large work arrays
mapped at once (:func:`mapped_empty`)."""
from __future__ import annotations

import mmap
import os

import numpy as np

from .exceptions import DenseMemoryError


#: n x n float64 matrices alive at the peak of dense EP (K, B's factor, the solve),
#: and of an ML-II step (the gradient's weights and the kernel derivative beside them);
#: measured as peak RSS over the import baseline at n = 4000.
DENSE_EP_MATRICES = 3


DENSE_MLII_MATRICES = 7


def host_memory_available():
    """Bytes this process may still allocate on the host: ``MemAvailable`` of
    /proc/meminfo, less where a cgroup (container) limit is lower; None if unknown."""
    avail = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    for limit, used in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                        ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                         "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit) as fh:
                text = fh.read().strip()
            if text.isdigit() and int(text) < 2 ** 60:
                with open(used) as fh:
                    avail.append(int(text) - int(fh.read().strip()))
                break
        except (OSError, ValueError):
            continue
    if not avail:
        try:
            avail.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return max(min(avail), 0)


def _gib(b):
    return f"{b / 2 ** 30:.1f} GiB"


def check_dense_memory(n, n_matrices, available, where="this machine"):
    """Raise :class:`DenseMemoryError` when ``n_matrices`` n x n float64 matrices do not
    fit in ``available`` bytes (None: unknown, no check).

    Examples
    --------
    >>> check_dense_memory(1000, 3, 2 ** 30)          # 24 MB of 1 GiB: fine
    >>> check_dense_memory(60_000, 3, 2 ** 30)      # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fastep.exceptions.DenseMemoryError: dense inference on n = 60000 points needs about 80.5 GiB ...
    """
    need = n_matrices * 8 * n * n
    if available is None or need <= available:
        return
    raise DenseMemoryError(
        f"dense inference on n = {n} points needs about {_gib(need)} ({n_matrices} matrices "
        f"of n x n float64), but {where} has {_gib(available)} available. Use sparse "
        f"inference with inducing points: n_inducing=500 (or --n-inducing 500 on the command "
        f"line); its memory grows as n x n_inducing.")


#: Arrays of at least this many bytes come from :func:`mapped_empty`'s mapping.
MAPPED_MIN_BYTES = 2 ** 26


def mapped_empty(shape):
    """An uninitialised float64 array of ``shape`` (C order) whose pages the kernel maps
    when it is made (Linux's ``MAP_POPULATE``), where it has at least
    :data:`MAPPED_MIN_BYTES`; else ``np.empty``.  For a large array written once per EP
    run (sparse EP's Gram cache, 2 GB at n = 10^6, m = 256): NumPy asks for huge pages on
    large arrays, and where the kernel then compacts memory at the first touch, the first
    write of a fresh 2 GB array took 1.9-4.6 s here, against 0.7 s mapped at once (a
    plain second write: 0.26 s)."""
    nbytes = 8 * int(np.prod(shape))
    populate = getattr(mmap, "MAP_POPULATE", None)
    if populate is None or nbytes < MAPPED_MIN_BYTES:
        return np.empty(shape)
    try:
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    except (OSError, ValueError):
        return np.empty(shape)
    return np.frombuffer(buf, dtype=np.float64).reshape(shape)   # unmapped with the array
