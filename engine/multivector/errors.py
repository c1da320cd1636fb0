"""Exception hierarchy of the multi-vector store (storage contract, "Error Handling").

The contract names five exceptions and mentions three more in prose; they map as follows:

    StorageError                      base of everything the store raises
    ├── ChromaDBError                 a Chroma call failed (the contract's "ChromaDBError")
    │   └── ChromaDBConnectionError   Chroma unreachable; the message names the URL or path
    ├── ValidationError (ValueError)  bad input (the contract's "ValidationError")
    │   ├── EmbeddingValidationError  embedding shape, dtype or values
    │   │   └── PayloadTooLargeError  encoded sequence over the 2 MB limit (also a
    │   │                             MetadataCompressionError)
    │   └── MetadataValidationError   missing or ill-typed metadata field
    ├── MetadataCompressionError      encoding or decoding the stored sequence failed
    │   └── DecompressionError        a stored payload is corrupt (the contract's name)
    └── DocumentNotFoundError (ValueError)  no record with that id

Validation and not-found errors are `ValueError`s, so code written against the contract's
"Raises ValueError" keeps working.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base exception for storage operations."""


class ChromaDBError(StorageError):
    """A Chroma operation failed."""


class ChromaDBConnectionError(ChromaDBError):
    """Cannot connect to the Chroma server (or open the embedded store)."""


class ValidationError(StorageError, ValueError):
    """Input rejected before anything was written."""


class EmbeddingValidationError(ValidationError):
    """Invalid embedding shape, dtype or values."""


class MetadataValidationError(ValidationError):
    """Missing or invalid metadata field."""


class MetadataCompressionError(StorageError):
    """Failed to compress or decompress embeddings."""


class DecompressionError(MetadataCompressionError):
    """A stored embedding payload cannot be decoded (corrupt or inconsistent metadata)."""


class PayloadTooLargeError(EmbeddingValidationError, MetadataCompressionError):
    """The encoded sequence exceeds the store's metadata size limit."""


class DocumentNotFoundError(StorageError, ValueError):
    """Document or embedding id not found in the collection."""
