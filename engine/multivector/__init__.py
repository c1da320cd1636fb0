"""Multi-vector storage on ChromaDB (shared/spec/multivector_storage_contract.md).

`ChromaClient` stores page (visual) and chunk (text) token-vector sequences, searches
their representative vectors (stage 1) and re-ranks by late interaction (stage 2).
`compress_embeddings` / `decompress_embeddings` are the contract's v1.0 codec;
`migrate_store` converts a store between storage versions.
"""

from __future__ import annotations

from engine.multivector.client import ChromaClient, doc_id_of
from engine.multivector.compression import (
    STORAGE_VERSIONS,
    compress_embeddings,
    decode_embeddings,
    decode_metadata,
    decompress_embeddings,
    encode_embeddings,
)
from engine.multivector.errors import (
    ChromaDBConnectionError,
    ChromaDBError,
    DecompressionError,
    DocumentNotFoundError,
    EmbeddingValidationError,
    MetadataCompressionError,
    MetadataValidationError,
    PayloadTooLargeError,
    StorageError,
    ValidationError,
)
from engine.multivector.late_interaction import maxsim_many, maxsim_scores
from engine.multivector.migrate import migrate_store
from engine.multivector.records import MAX_PAYLOAD_BYTES

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "STORAGE_VERSIONS",
    "ChromaClient",
    "ChromaDBConnectionError",
    "ChromaDBError",
    "DecompressionError",
    "DocumentNotFoundError",
    "EmbeddingValidationError",
    "MetadataCompressionError",
    "MetadataValidationError",
    "PayloadTooLargeError",
    "StorageError",
    "ValidationError",
    "compress_embeddings",
    "decode_embeddings",
    "decode_metadata",
    "decompress_embeddings",
    "doc_id_of",
    "encode_embeddings",
    "maxsim_many",
    "maxsim_scores",
    "migrate_store",
]
