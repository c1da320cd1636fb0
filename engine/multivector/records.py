"""Validation of what callers hand the store, and the records it builds from them.

Metadata fields (contract "Metadata Schema"): who provides what.

    caller must give   filename (non-empty str), source_path (str);
                       text records also `text` (the chunk; the store keeps its first 200
                       characters as text_preview and counts word_count) or both
                       text_preview (str, cut to 200 chars) and word_count (int >= 0)
    caller may give    timestamp (ISO 8601; default: now, UTC), file_size (int >= 0),
                       page on text records (int >= 1), doc_id / type (must then equal the
                       store's values), any other str / int / float / bool field
    store fills        doc_id, type ("visual" | "text"), page (visual) / chunk_id (text),
                       full_embeddings, seq_length, embedding_shape, storage_version

A missing or ill-typed field raises MetadataValidationError naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engine.multivector.compression import encode_embeddings, format_shape
from engine.multivector.errors import (
    EmbeddingValidationError,
    MetadataValidationError,
    PayloadTooLargeError,
)

KINDS = ("visual", "text")
# The contract's "<2MB (ChromaDB limit)", read as 2 MiB of encoded (base64) text.
MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
TEXT_PREVIEW_CHARS = 200
_ACCEPTED_DTYPES = (np.float32, np.float16)
_STORE_FIELDS = frozenset({"full_embeddings", "seq_length", "embedding_shape", "storage_version"})
_INDEX_FIELD = {"visual": "page", "text": "chunk_id"}


def record_id(kind: str, doc_id: str, index: int) -> str:
    """Contract ids: "{doc_id}-page{page:03d}" (visual), "{doc_id}-chunk{chunk_id:04d}" (text)."""
    return f"{doc_id}-page{index:03d}" if kind == "visual" else f"{doc_id}-chunk{index:04d}"


def check_kind(kind: str) -> str:
    """`kind` if it is "visual" or "text", else MetadataValidationError."""
    if kind not in KINDS:
        raise MetadataValidationError(f"collection must be one of {KINDS}, got {kind!r}")
    return kind


def check_doc_id(doc_id: Any) -> str:
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise MetadataValidationError(f"doc_id must be a non-empty str, got {doc_id!r}")
    return doc_id


def check_index(kind: str, index: Any) -> int:
    """Visual pages are 1-indexed, text chunks 0-indexed (contract)."""
    lowest = 1 if kind == "visual" else 0
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < lowest:
        raise MetadataValidationError(f"{_INDEX_FIELD[kind]} must be an int >= {lowest}, got {index!r}")
    return int(index)


def validate_embeddings(embeddings: Any, dim: int, name: str = "full_embeddings") -> np.ndarray:
    """Check a (seq_length > 0, dim) float32/float16 finite array → C-contiguous float32."""
    if not isinstance(embeddings, np.ndarray):
        raise EmbeddingValidationError(f"{name} must be a numpy array, got {type(embeddings).__name__}")
    if embeddings.dtype not in _ACCEPTED_DTYPES:
        raise EmbeddingValidationError(f"{name} dtype must be float32 or float16, got {embeddings.dtype}")
    if embeddings.ndim != 2 or embeddings.shape[0] == 0 or embeddings.shape[1] != dim:
        raise EmbeddingValidationError(
            f"{name} must have shape (seq_length > 0, {dim}), got {embeddings.shape}"
        )
    if not np.isfinite(embeddings).all():
        raise EmbeddingValidationError(f"{name} contains NaN or infinite values")
    return np.ascontiguousarray(embeddings, dtype=np.float32)


def validate_query_vector(query: Any, dim: int) -> np.ndarray:
    """A stage-1 query: (dim,) finite float32/float16 with non-zero norm → float32."""
    if not isinstance(query, np.ndarray):
        raise EmbeddingValidationError(f"query_embedding must be a numpy array, got {type(query).__name__}")
    if query.shape != (dim,):
        raise EmbeddingValidationError(f"query_embedding must have shape ({dim},), got {query.shape}")
    rows = validate_embeddings(query.reshape(1, dim), dim, "query_embedding")
    if not np.any(rows):
        raise EmbeddingValidationError("query_embedding is all zeros; cosine similarity is undefined")
    return rows[0]


def _check_scalar(key: str, value: Any) -> None:
    if not isinstance(key, str) or not key:
        raise MetadataValidationError(f"metadata keys must be non-empty str, got {key!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise MetadataValidationError(f"metadata field {key!r} must be finite, got {value!r}")
    if not isinstance(value, (str, int, float, bool)):
        raise MetadataValidationError(
            f"metadata field {key!r} must be str, int, float or bool (Chroma metadata), got "
            f"{type(value).__name__}"
        )


def _require(metadata: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    if key not in metadata:
        raise MetadataValidationError(f"metadata field {key!r} is required ({what})")
    value = metadata[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise MetadataValidationError(f"metadata field {key!r} must be {what}, got {value!r}")
    return value


def _check_timestamp(value: Any) -> str:
    if not isinstance(value, str):
        raise MetadataValidationError(f"metadata field 'timestamp' must be an ISO 8601 str, got {value!r}")
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise MetadataValidationError(f"metadata field 'timestamp' is not ISO 8601: {value!r}") from None
    return value


def build_metadata(kind: str, doc_id: str, index: int, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validated caller metadata plus the store's identity fields (no payload fields yet)."""
    if metadata is None or not isinstance(metadata, Mapping):
        raise MetadataValidationError(f"metadata must be a dict, got {type(metadata).__name__}")
    fields = dict(metadata)
    reserved = sorted(_STORE_FIELDS & fields.keys())
    if reserved:
        raise MetadataValidationError(
            f"metadata fields {reserved} are set by the store and must not be given"
        )
    for key, expected in (("doc_id", doc_id), ("type", kind), (_INDEX_FIELD[kind], index)):
        if key in fields and fields[key] != expected:
            raise MetadataValidationError(
                f"metadata field {key!r} is {fields[key]!r} but the record's is {expected!r}"
            )
    filename = _require(fields, "filename", str, "a non-empty str")
    if not filename:
        raise MetadataValidationError("metadata field 'filename' must be a non-empty str")
    _require(fields, "source_path", str, "a str")
    if "file_size" in fields and _require(fields, "file_size", int, "an int >= 0") < 0:
        raise MetadataValidationError(f"metadata field 'file_size' must be >= 0, got {fields['file_size']}")
    fields["timestamp"] = _check_timestamp(fields.get("timestamp", datetime.now(UTC).isoformat()))
    if kind == "text":
        if "page" in fields and _require(fields, "page", int, "an int >= 1") < 1:
            raise MetadataValidationError(f"metadata field 'page' must be >= 1, got {fields['page']}")
        text = fields.pop("text", None)
        if text is not None:
            if not isinstance(text, str):
                raise MetadataValidationError(
                    f"metadata field 'text' must be a str, got {type(text).__name__}"
                )
            fields.setdefault("text_preview", text)
            fields.setdefault("word_count", len(text.split()))
        what = "a str; or give 'text' instead"
        fields["text_preview"] = _require(fields, "text_preview", str, what)[:TEXT_PREVIEW_CHARS]
        if _require(fields, "word_count", int, "an int >= 0; or give 'text' instead") < 0:
            raise MetadataValidationError(
                f"metadata field 'word_count' must be >= 0, got {fields['word_count']}"
            )
    fields.update({"doc_id": doc_id, "type": kind, _INDEX_FIELD[kind]: index})
    for key, value in fields.items():
        _check_scalar(key, value)
    return fields


def build_record(
    kind: str, doc_id: Any, index: Any, embeddings: Any, metadata: Any, *, dim: int, storage_version: str
) -> tuple[str, np.ndarray, dict[str, Any]]:
    """Validate one add → (id, representative (dim,) float32, full Chroma metadata)."""
    doc_id = check_doc_id(doc_id)
    index = check_index(kind, index)
    rows = validate_embeddings(embeddings, dim)
    fields = build_metadata(kind, doc_id, index, metadata)
    payload = encode_embeddings(rows, storage_version)
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLargeError(
            f"{record_id(kind, doc_id, index)}: encoded {rows.shape} sequence is {len(payload)} bytes in "
            f"storage_version {storage_version}, over the {MAX_PAYLOAD_BYTES}-byte limit"
        )
    fields.update(
        full_embeddings=payload,
        seq_length=int(rows.shape[0]),
        embedding_shape=format_shape(rows.shape),
        storage_version=storage_version,
    )
    return record_id(kind, doc_id, index), rows[0].copy(), fields


def filters_to_where(filters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """{"filename": "a.pdf", "page": {"$gte": 3}} → Chroma `where`; several keys → $and.

    A dict whose single key is an operator ("$and", "$or") is passed through unchanged.
    """
    if not filters:
        return None
    if not isinstance(filters, Mapping):
        raise MetadataValidationError(f"filters must be a dict, got {type(filters).__name__}")
    if len(filters) == 1:
        return dict(filters)
    if any(key.startswith("$") for key in filters):
        raise MetadataValidationError(
            f"an operator key must be the only key of filters, got {sorted(filters)}"
        )
    return {"$and": [{key: value} for key, value in filters.items()]}
