"""The serialisation format of a backup's `database.jsonl`: Django's JSON Lines, with every
datetime and time to the microsecond.

Django's JSON encoder (`DjangoJSONEncoder`) writes them as ECMAScript does, cut to milliseconds, so
a row dumped with the built-in `jsonl` comes back 0.543 s where it was 0.543529 s. This format
writes the same lines with full ISO 8601 values (`isoformat()`), which the built-in `jsonl`
deserializer reads as they are: a backup is written with this format (`manage.py dumpdata --format
jsonl_exact`, registered by `SERIALIZATION_MODULES`) and read by `loaddata` like any `.jsonl` file.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.core.serializers import jsonl
from django.core.serializers.json import DjangoJSONEncoder

FORMAT_NAME = "jsonl_exact"


class ExactJSONEncoder(DjangoJSONEncoder):
    """DjangoJSONEncoder, but datetimes and times keep their microseconds."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime.datetime | datetime.time):
            return o.isoformat()
        return super().default(o)


class Serializer(jsonl.Serializer):
    """JSON Lines through `ExactJSONEncoder` (the documented `cls` option of Django's JSON serializers)."""

    def serialize(self, queryset: Any, **options: Any) -> Any:
        return super().serialize(queryset, **{"cls": ExactJSONEncoder, **options})


Deserializer = jsonl.Deserializer
