"""What the tests share: slow dense NumPy references (``reference``), the fuzzing promise and
its strategies (``properties``), and the script of the GPU checks (``cuda_checks``, run in a
subprocess by ``tests/backend/test_cuda.py``)."""
