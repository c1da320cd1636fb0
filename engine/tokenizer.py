"""The Tokenizer protocol the engine consumes (implementations live beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import requests


@runtime_checkable
class Tokenizer(Protocol):
    """What the HDC engine needs from a tokenizer: exactly llama.cpp's token ids."""

    vocab_size: int
    special_ids: set[int]

    def tokenize(self, text: str) -> list[int]: ...

    def bulk_tokenize(self, texts: list[str]) -> list[list[int]]: ...

    def count_tokens(self, text: str) -> int: ...

    def detokenize(self, tokens: list[int]) -> str: ...


class LLMUnavailableError(ConnectionError):
    """The llama.cpp server could not be reached or answered with an error; names the URL."""


class LlamaCppTokenizer:
    """The Tokenizer protocol over a llama.cpp server's `/tokenize` and `/detokenize`.

    Flags sent with every request (both default to content tokens only, as the engine indexes):
    - `add_special=False`: no BOS/EOS are added (llama.cpp's server default too).
    - `parse_special=False`: control-token text such as "<start_of_turn>" inside a document
      is tokenized as plain text, so documents cannot inject control tokens. llama.cpp's
      server defaults to True; user-defined tokens (Gemma's whitespace runs, HTML tags) are
      matched either way.

    `vocab_size` comes from `/v1/models`. `special_ids` (control and unknown tokens) comes
    from `gguf_path` when given; otherwise it is the BOS/EOS ids the server reports.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        add_special: bool = False,
        parse_special: bool = False,
        gguf_path: str | Path | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.add_special = add_special
        self.parse_special = parse_special
        self._session = requests.Session()
        models = self._request("GET", "/v1/models")
        try:
            self.vocab_size = int(models["data"][0]["meta"]["n_vocab"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise LLMUnavailableError(
                f"{self.base_url}/v1/models did not report n_vocab: {str(models)[:200]}"
            ) from None
        if gguf_path is not None:
            from engine.gguf import read_metadata
            from engine.spm import TYPE_CONTROL, TYPE_UNKNOWN, effective_token_types

            metadata = read_metadata(gguf_path)
            types = effective_token_types(metadata.tokens, metadata.token_types)
            self.special_ids = {
                i for i, kind in enumerate(types.tolist()) if kind in (TYPE_CONTROL, TYPE_UNKNOWN)
            }
        else:
            props = self._request("GET", "/props")
            texts = [props[key] for key in ("bos_token", "eos_token") if props.get(key)]
            self.special_ids = {t for text in texts for t in self._tokens(text, parse_special=True)}

    def _request(self, method: str, path: str, payload: dict | None = None) -> dict:
        url = f"{self.base_url}{path}"
        try:
            response = self._session.request(method, url, json=payload, timeout=self.timeout)
        except requests.RequestException as exc:
            raise LLMUnavailableError(f"llama.cpp server unavailable at {url}: {exc}") from exc
        if response.status_code != 200:
            raise LLMUnavailableError(
                f"llama.cpp server at {url} answered {response.status_code}: {response.text[:300]}"
            )
        return response.json()

    def _tokens(self, text: str, parse_special: bool) -> list[int]:
        payload = {"content": text, "add_special": self.add_special, "parse_special": parse_special}
        return self._request("POST", "/tokenize", payload)["tokens"]

    def tokenize(self, text: str) -> list[int]:
        return self._tokens(text, self.parse_special)

    def bulk_tokenize(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenize(text) for text in texts]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def detokenize(self, tokens: list[int]) -> str:
        return self._request("POST", "/detokenize", {"tokens": list(tokens)})["content"]

    def close(self) -> None:
        self._session.close()


# The in-process implementation lives in engine/spm.py; re-exported so callers import one module.
from engine.spm import GGUFTokenizer  # noqa: E402

# `tokenizer.ggml.model` values the engine tokenizes in process (exactly as llama.cpp does).
IN_PROCESS_MODELS = frozenset({"llama"})


def index_tokenizer_refusal(tokenizer_model: str) -> str | None:
    """Why a GGUF with this `tokenizer.ggml.model` cannot build a corpus's index; None when it can.

    A build and every later search of it cut text into the model's exact llama.cpp ids inside the
    portal's web and worker processes, with no server per model: only a vocabulary the engine
    tokenizes in process will do (docs/embedding-model.md).
    """
    if tokenizer_model in IN_PROCESS_MODELS:
        return None
    return (f"This model's tokenizer is {tokenizer_model!r}; index builds and their searches tokenize in "
            "process, which the engine does for SentencePiece ('llama') vocabularies such as Gemma's. "
            "A chat model need not be one: it is served by the LLM server.")


def in_process_tokenizer(gguf_path: str | Path) -> Tokenizer | None:
    """The GGUF's own tokenizer run in process, or None when the engine has none for its kind
    (byte-level BPE such as Qwen's: only a llama.cpp server tokenizes those, `LlamaCppTokenizer`)."""
    from engine.gguf import read_metadata

    metadata = read_metadata(gguf_path)
    if metadata.tokenizer_model not in IN_PROCESS_MODELS:
        return None
    return GGUFTokenizer.from_metadata(metadata)


__all__ = ["IN_PROCESS_MODELS", "GGUFTokenizer", "LLMUnavailableError", "LlamaCppTokenizer", "Tokenizer",
           "in_process_tokenizer", "index_tokenizer_refusal"]
