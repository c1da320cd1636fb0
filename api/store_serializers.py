"""The serializers of the multi-vector store's API (`api.views.store`): embedding matrices in,
JSON or base64, and the store's items, hits and counts out."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

_FLOAT_ROWS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
_BASE64 = {"type": "object", "required": ["base64", "shape"],
           "properties": {"base64": {"type": "string", "description": "Little-endian float32 bytes."},
                          "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}}}}


@extend_schema_field({"oneOf": [_FLOAT_ROWS, {"type": "array", "items": {"type": "number"}}, _BASE64]})
class EmbeddingsField(serializers.Field):
    """A (rows, dim) float32 matrix (or a (dim,) vector with `vector=True`): a JSON array of
    float arrays, or {"base64": little-endian float32 bytes, "shape": [rows, dim]}."""

    def __init__(self, *, vector: bool = False, **kwargs: Any) -> None:
        self.vector = vector
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> np.ndarray:
        if isinstance(data, dict):
            array = self._from_base64(data)
        elif isinstance(data, list):
            try:
                # Values beyond float32 become inf here and are refused below as not finite.
                with np.errstate(over="ignore"):
                    array = np.asarray(data, dtype=np.float32)
            except (ValueError, TypeError):
                raise serializers.ValidationError(
                    "Expected an array of numbers"
                    + ("." if self.vector else " per row, rows of equal length.")
                ) from None
        else:
            raise serializers.ValidationError("Expected a JSON array or {\"base64\", \"shape\"}.")
        wanted = 1 if self.vector else 2
        if array.ndim != wanted or 0 in array.shape:
            raise serializers.ValidationError(f"Expected a non-empty {wanted}-dimensional array, got shape "
                                              f"{list(array.shape)}.")
        if array.shape[-1] != settings.MULTIVECTOR_DIM:
            raise serializers.ValidationError(
                f"Expected width {settings.MULTIVECTOR_DIM}, got {array.shape[-1]}."
            )
        if not np.isfinite(array).all():
            raise serializers.ValidationError("Values must be finite float32 numbers (|x| < 3.4e38).")
        return array

    def _from_base64(self, data: dict) -> np.ndarray:
        shape = data.get("shape")
        encoded = data.get("base64")
        if (
            not isinstance(encoded, str)
            or not isinstance(shape, list)
            or not shape
            or len(shape) > 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1 << 20 for n in shape)
        ):
            raise serializers.ValidationError(
                "base64 needs a string `base64` and a `shape` of positive ints."
            )
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("`base64` is not valid base64.") from None
        expected = int(np.prod(shape)) * 4
        if len(raw) != expected:
            raise serializers.ValidationError(
                f"`base64` holds {len(raw)} bytes; shape {shape} of float32 needs {expected}."
            )
        return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)

    def to_representation(self, value: np.ndarray) -> list:
        return np.asarray(value, dtype=np.float32).tolist()


class StoreItemSerializer(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=999999, help_text="Page number or chunk id.")
    embeddings = EmbeddingsField(help_text="(seq_length, dim) floats, or {base64, shape}.")
    metadata = serializers.DictField(required=False, default=dict)


class StoreAddSerializer(serializers.Serializer):
    doc_id = serializers.CharField(max_length=200)
    index = serializers.IntegerField(min_value=0, max_value=999999, help_text="Page number or chunk id.")
    embeddings = EmbeddingsField(help_text="(seq_length, dim) floats, or {base64, shape}.")
    metadata = serializers.DictField(required=False, default=dict)


class StoreBatchSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["visual", "text"], help_text="visual: pages; text: chunks.")
    doc_id = serializers.CharField(max_length=200)
    items = StoreItemSerializer(many=True, allow_empty=False, max_length=500)


class StoreSearchSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["visual", "text"])
    query = EmbeddingsField(vector=True, help_text="(dim,) floats, or {base64, shape}.")
    n_results = serializers.IntegerField(min_value=1, max_value=1000, default=10)
    filters = serializers.DictField(required=False, allow_null=True, default=None)


class StoreMultiSearchSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["visual", "text"])
    query = EmbeddingsField(help_text="(q, dim) floats, or {base64, shape}.")
    n_candidates = serializers.IntegerField(min_value=1, max_value=1000, default=100)
    n_results = serializers.IntegerField(min_value=1, max_value=1000, default=10)
    filters = serializers.DictField(required=False, allow_null=True, default=None)


class StoreHitSerializer(serializers.Serializer):
    id = serializers.CharField()
    score = serializers.FloatField()
    late_interaction_score = serializers.FloatField(required=False)
    metadata = serializers.DictField()


class StoreStatsSerializer(serializers.Serializer):
    visual_count = serializers.IntegerField()
    text_count = serializers.IntegerField()
    total_documents = serializers.IntegerField()
    storage_size_mb = serializers.FloatField()


class StoreAddedSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.CharField(), help_text="The records written, in the order given."
    )


class StoreDeletedSerializer(serializers.Serializer):
    pages = serializers.IntegerField(help_text="Page records deleted.")
    chunks = serializers.IntegerField(help_text="Chunk records deleted.")


class StoreDocumentSerializer(serializers.Serializer):
    doc_id = serializers.CharField()
    pages = serializers.IntegerField()
    chunks = serializers.IntegerField()


class EmbeddingsResponseSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.CharField()
    shape = serializers.ListField(child=serializers.IntegerField())
    embeddings = serializers.JSONField(required=False, help_text="Nested float arrays (encoding=json).")
    base64 = serializers.CharField(required=False, help_text="Little-endian float32 (encoding=base64).")
