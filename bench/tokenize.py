"""Bulk tokenization throughput: in-process GGUFTokenizer vs llama.cpp's /tokenize over HTTP.

Text: the Python stdlib's `pydoc_data.topics` (real English prose with code), split into
paragraphs. The baseline (LlamaCppTokenizer against a llama.cpp server started here on the
same GGUF) runs in the same process and run; both must produce identical ids.

    .venv/bin/python bench/tokenize.py [--gguf PATH] [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder leads sys.path and this module would shadow the
# stdlib's `tokenize` (imported by inspect/linecache); put the repo root there instead.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import time  # noqa: E402

from bench._hw import print_hardware  # noqa: E402
from engine.llama_server import LlamaServer  # noqa: E402
from engine.model_files import default_gguf_path  # noqa: E402
from engine.tokenizer import GGUFTokenizer, LlamaCppTokenizer  # noqa: E402


def corpus() -> list[str]:
    import pydoc_data.topics

    return [part for text in pydoc_data.topics.topics.values() for part in text.split("\n\n") if part.strip()]


def timed(label: str, run, repeat: int) -> tuple[float, list[list[int]]]:
    best, result = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    n_tokens = sum(map(len, result))
    print(f"{label:<34} {n_tokens:>9} tokens  {best:8.3f} s  {n_tokens / best:>12,.0f} tokens/s")
    return n_tokens / best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf", type=Path, default=None, help="GGUF model (default: the packaged Gemma 3 270M)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp server threads")
    args = parser.parse_args()
    gguf_path = args.gguf or default_gguf_path()

    print_hardware()
    texts = corpus()
    print(f"\n== corpus == pydoc_data.topics: {len(texts)} paragraphs, {sum(map(len, texts)):,} characters")
    print(f"== model  == {gguf_path}\n")

    start = time.perf_counter()
    local = GGUFTokenizer.from_gguf(gguf_path)
    print(f"GGUFTokenizer load: {time.perf_counter() - start:.2f} s")

    with LlamaServer(gguf_path, threads=args.threads, parallel=1, ctx_size=2048) as server:
        http = LlamaCppTokenizer(server.base_url)
        base_rate, base_ids = timed(
            "baseline: llama.cpp /tokenize HTTP", lambda: http.bulk_tokenize(texts), args.repeat
        )
        local._cache.clear()
        cold_rate, cold_ids = timed("GGUFTokenizer (cold word cache)", lambda: local.bulk_tokenize(texts), 1)
        warm_rate, warm_ids = timed(
            "GGUFTokenizer (warm word cache)", lambda: local.bulk_tokenize(texts), args.repeat
        )
    if not base_ids == cold_ids == warm_ids:
        raise SystemExit("MISMATCH: GGUFTokenizer ids differ from llama.cpp's")
    print("\nids identical to llama.cpp: yes")
    print(f"ratio cold / baseline: {cold_rate / base_rate:6.1f}x")
    print(f"ratio warm / baseline: {warm_rate / base_rate:6.1f}x")


if __name__ == "__main__":
    main()
