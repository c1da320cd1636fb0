"""Test data: seeded sequences, valid metadata and the slow MaxSim reference."""

from __future__ import annotations

import numpy as np


def sequence(rng: np.random.Generator, seq_length: int, dim: int = 768, dtype=np.float32) -> np.ndarray:
    """(seq_length, dim) random-normal rows."""
    return rng.standard_normal((seq_length, dim)).astype(dtype)


def visual_meta(filename: str = "Q3-2023-Earnings.pdf", **extra) -> dict:
    return {
        "filename": filename,
        "source_path": f"/data/uploads/finance/{filename}",
        "file_size": 1234,
        **extra,
    }


def text_meta(
    filename: str = "Q3-2023-Earnings.pdf", text: str = "Revenue grew nine percent", **extra
) -> dict:
    return {"filename": filename, "source_path": f"/data/uploads/finance/{filename}", "text": text, **extra}


def maxsim_reference(query: np.ndarray, document: np.ndarray) -> float:
    """Obviously-correct MaxSim: for each query row, max dot product over document rows."""
    total = 0.0
    for query_row in query.astype(np.float64):
        total += max(float(np.dot(query_row, row)) for row in document.astype(np.float64))
    return total
