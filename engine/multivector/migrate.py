"""Convert a multi-vector store between storage versions in place.

    .venv/bin/python -m engine.multivector.migrate --path DIR --to 1.1
    .venv/bin/python -m engine.multivector.migrate --url http://127.0.0.1:8000 --to 1.1

Records are read and rewritten in batches. Each record is decoded, re-encoded, and the new
payload decoded again and compared with the expected values (bit-exact for 1.0, the
float16 rounding of the original for 1.1) before its `full_embeddings` and
`storage_version` fields are replaced; nothing else in the record changes. Each record is
valid in its old or its new version at every moment, so an interrupted run loses nothing
and a second run finishes the job. Records already in the target version are skipped,
which makes the migration idempotent.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import numpy as np

from engine.multivector.client import ChromaClient
from engine.multivector.compression import (
    STORAGE_VERSIONS,
    check_version,
    decode_embeddings,
    decode_metadata,
    encode_embeddings,
    record_version,
)
from engine.multivector.errors import MetadataCompressionError, PayloadTooLargeError, StorageError
from engine.multivector.records import KINDS, MAX_PAYLOAD_BYTES

_ROUNDING = {"1.0": np.float32, "1.1": np.float16}


def _convert(embedding_id: str, metadata: dict, target_version: str) -> str:
    """The record's payload re-encoded in `target_version`, verified by decoding it back."""
    try:
        rows = decode_metadata(metadata)
    except StorageError as error:
        raise type(error)(f"record {embedding_id!r}: {error}") from None
    payload = encode_embeddings(rows, target_version)
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise PayloadTooLargeError(
            f"record {embedding_id!r}: {rows.shape} in storage_version {target_version} is "
            f"{len(payload)} bytes, over the {MAX_PAYLOAD_BYTES}-byte limit"
        )
    expected = rows.astype(_ROUNDING[target_version]).astype(np.float32)
    if not np.array_equal(decode_embeddings(payload, rows.shape, target_version), expected):
        raise MetadataCompressionError(
            f"record {embedding_id!r}: round trip to {target_version} changed values"
        )
    return payload


def migrate_store(
    client: ChromaClient, target_version: str, batch_size: int = 100
) -> dict[str, dict[str, int]]:
    """Rewrite every record of both collections into `target_version`.

    Returns {"visual": {"converted": n, "unchanged": m}, "text": {...}}. Raises the
    store's errors (naming the record) on a corrupt payload or one that would exceed the
    size limit in the target version; records converted before that stay converted.
    """
    check_version(target_version)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    counts: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        collection = client.chroma_collection(kind)
        # List every id before writing, so updates never shift the pages being listed.
        ids = [embedding_id for page in client.iter_ids(kind) for embedding_id in page]
        converted = unchanged = 0
        for start in range(0, len(ids), batch_size):
            with client.guarded(f"read {kind} batch for migration"):
                found = collection.get(ids=ids[start : start + batch_size], include=["metadatas"])
            new_ids, new_fields = [], []
            for embedding_id, metadata in zip(found["ids"], found["metadatas"], strict=True):
                if "storage_version" in metadata and record_version(metadata) == target_version:
                    unchanged += 1
                    continue
                new_ids.append(embedding_id)
                new_fields.append(
                    {
                        "full_embeddings": _convert(embedding_id, metadata, target_version),
                        "storage_version": target_version,
                    }
                )
            if new_ids:
                with client.guarded(f"write {kind} batch for migration"):
                    collection.update(ids=new_ids, metadatas=new_fields)
                converted += len(new_ids)
        counts[kind] = {"converted": converted, "unchanged": unchanged}
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.multivector.migrate", description=__doc__.split("\n\n")[0]
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--path", help="embedded Chroma directory (PersistentClient)")
    where.add_argument("--url", help="Chroma server URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--to", required=True, choices=STORAGE_VERSIONS, help="target storage version")
    parser.add_argument("--visual-collection", default="visual_collection")
    parser.add_argument("--text-collection", default="text_collection")
    parser.add_argument("--dim", type=int, default=768, help="embedding width of the store")
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args(argv)
    try:
        client = ChromaClient(
            visual_collection=args.visual_collection,
            text_collection=args.text_collection,
            path=args.path,
            url=args.url,
            dim=args.dim,
        )
        counts = migrate_store(client, args.to, batch_size=args.batch_size)
    except StorageError as error:
        print(f"migration failed: {error}", file=sys.stderr)
        return 1
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
