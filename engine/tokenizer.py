"""The Tokenizer protocol the engine consumes (implementations live beside it)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
    """What the HDC engine needs from a tokenizer: exactly llama.cpp's token ids."""

    vocab_size: int
    special_ids: set[int]

    def tokenize(self, text: str) -> list[int]: ...

    def bulk_tokenize(self, texts: list[str]) -> list[list[int]]: ...

    def count_tokens(self, text: str) -> int: ...

    def detokenize(self, tokens: list[int]) -> str: ...
