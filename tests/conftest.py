"""Test-session setup.

OMP_WAIT_POLICY=passive: Numba's OpenMP threading layer otherwise spin-waits between
parallel regions and starves the OpenBLAS threads of scipy's LAPACK calls; on a small
(2-core) machine that slows dense EP by 10-30x (e.g. parallel EP at n = 300: ~10 s instead
of ~0.3 s).  This only affects speed, not results; it must be set before Numba's OpenMP
runtime is loaded, hence here.  (Reported upstream as a performance issue of fastep.)
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
