"""HdRAG engine: ternary hyperdimensional retrieval over GGUF token embeddings.

Pure Python (numpy, numba, torch, gguf). Never imports Django or the portal apps.
"""

import os

# The engine's numba kernels run their parallel loops on OpenMP (libgomp, the copy torch loads),
# whose idle threads spin for GOMP's default 300,000 rounds after each loop before they sleep,
# burning a core that whatever else runs on the machine needs (the llama.cpp server's prefill,
# other requests, the next process to search). 10,000 rounds keep a search's wall time and cut
# most of that spinning; the llama.cpp server (libgomp too) is not slowed by it (figures:
# docs/scaling.md, "Searches at once"). libgomp reads the variable once, when it is loaded (by
# torch or numba, both imported after this package); a value already in the environment wins.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
