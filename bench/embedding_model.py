"""Which GGUF's token embeddings a retrieval evaluation builds from, and how its texts are tokenized.

`open_embedding_model` takes `--gguf` of bench/retrieval_eval.py: nothing (or "embeddings") for the
packaged Gemma 3 270M, "chat" for the packaged Qwen2.5-Coder-0.5B-Instruct, or a path. A model whose
tokenizer the engine runs in process (`engine.tokenizer.in_process_tokenizer`) is tokenized so;
any other is tokenized by a real llama.cpp server on the same GGUF (`/tokenize` over loopback), so
the ids are exactly llama.cpp's either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from engine.tokenizer import Tokenizer

# The tokenizing server computes nothing but /tokenize: a small context, one slot per thread.
SERVER_CTX_SIZE = 512


@dataclass(frozen=True)
class EmbeddingModel:
    """A GGUF and a factory of its tokenizer (a fresh one per ranker: the in-process one caches words,
    which would flatter whichever ranker tokenizes second)."""

    path: Path
    make_tokenizer: Callable[[], Tokenizer]
    tokenized_by: str

    def describe(self) -> str:
        from engine.gguf import embedding_tensor_info, read_metadata

        metadata = read_metadata(self.path)
        tensor = embedding_tensor_info(self.path)
        return (
            f"embedding model: {self.path.name} ({metadata.architecture}, tokenizer "
            f"{metadata.tokenizer_model!r} tokenized {self.tokenized_by}); token_embd "
            f"{tensor.tensor_type.name} {tensor.shape[0]:,} x {tensor.shape[1]}"
        )


@dataclass(frozen=True)
class TokenizationSpeed:
    documents: int
    tokens: int
    seconds: float

    def __str__(self) -> str:
        return (
            f"tokenization: {self.documents:,} documents, {self.tokens:,} tokens in {self.seconds:.2f} s: "
            f"{self.documents / self.seconds:,.0f} docs/s, {self.tokens / self.seconds:,.0f} tokens/s"
        )


def resolve_gguf(choice: str | None) -> Path:
    """`--gguf`: None or "embeddings" (packaged Gemma), "chat" (packaged Qwen chat model), or a path."""
    from engine.model_files import default_chat_gguf_path, default_gguf_path

    if choice in (None, "", "embeddings"):
        return default_gguf_path()
    if choice == "chat":
        return default_chat_gguf_path()
    path = Path(choice)
    if not path.is_file():
        raise FileNotFoundError(f"--gguf {choice}: no such file")
    return path


def open_embedding_model(choice: str | None, stack: ExitStack, *, threads: int) -> EmbeddingModel:
    """The model `choice` names; a llama.cpp server it needs is stopped when `stack` closes."""
    from engine.gguf import read_metadata
    from engine.llama_server import LlamaServer
    from engine.tokenizer import IN_PROCESS_MODELS, LlamaCppTokenizer, in_process_tokenizer

    path = resolve_gguf(choice)
    if read_metadata(path).tokenizer_model in IN_PROCESS_MODELS:
        return EmbeddingModel(path, lambda: in_process_tokenizer(path), "in process")
    server = stack.enter_context(LlamaServer(path, ctx_size=SERVER_CTX_SIZE, threads=threads, parallel=1))
    return EmbeddingModel(path, lambda: LlamaCppTokenizer(server.base_url, gguf_path=path),
                          f"by llama.cpp /tokenize at {server.base_url}")


def measure_tokenization(model: EmbeddingModel, documents: list[str]) -> TokenizationSpeed:
    """Tokenize `documents` once with a fresh tokenizer (its load included), as a build's first pass does."""
    start = time.perf_counter()
    tokens = model.make_tokenizer().bulk_tokenize(documents)
    seconds = time.perf_counter() - start
    return TokenizationSpeed(len(documents), sum(len(ids) for ids in tokens), seconds)
