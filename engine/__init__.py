"""HdRAG engine: ternary hyperdimensional retrieval over GGUF token embeddings.

Pure Python (numpy, numba, torch, gguf). Never imports Django or the portal apps.
"""
