"""HdRAG engine: ternary hyperdimensional retrieval over GGUF token embeddings.

Pure Python (numpy, numba, torch, gguf). Never imports Django or the portal apps.
"""

import os

# The engine's numba kernels run their parallel loops on OpenMP (libgomp, the copy torch loads),
# whose idle threads spin for GOMP's default 300,000 rounds after each loop before they sleep:
# ~9 ms of a core per search (21-22 ms of CPU for an 11 ms search, bench/api.py), taken from
# whatever else runs on the machine (the llama.cpp server's prefill, other requests, the next
# process to search). 10,000 rounds keep a search's wall time and cut its CPU to 12.5-14 ms.
# libgomp reads the variable once, when it is loaded (by torch or numba, both imported after
# this package); a value already in the environment wins. The llama.cpp server (`python -m
# engine.llama_server`, libgomp too) ran the same either way: prefill 299 vs 298 tokens/s,
# generation 67 vs 68 (Qwen2.5-Coder-0.5B Q4_0, 2 threads, 3 starts each).
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
