"""The parts of ``benchmarks/gpu_check.py``: results and pytest reports (:mod:`.results`), prebuilt
example images (:mod:`.assets`), and the steps that run in child processes (:mod:`.examples`,
:mod:`.interop`, :mod:`.percall`)."""
