"""Re-encode a GGUF's weight matrices in quantization types this CPU runs faster.

llama.cpp's CPU kernels differ a lot by quantization type: it repacks Q4_0 matrices into
interleaved blocks for its AVX2/AVX-512 matrix kernels, so the packaged chat model, mostly Q5_0,
prefills and generates markedly faster with those matrices in Q4_0 (figures: docs/models.md), and
the time to first token of a chat turn is its prefill.
`requantize` dequantizes each matrix of a type in the plan and quantizes it again
(gguf-py's reference quantizers, numpy), copies every other tensor and all metadata unchanged, and
records its source and plan in the new file's metadata (`hdrag.requantized.*`), so a cached
result is reused only when it came from the same source with the same plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engine.files import atomic_write

if TYPE_CHECKING:  # for annotations only: gguf-py is imported inside the functions that use it
    from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter, ReaderTensor

SOURCE_KEY = "hdrag.requantized.source_sha256"
PLAN_KEY = "hdrag.requantized.plan"


class RequantizeError(RuntimeError):
    """The source is not a model GGUF, or the plan names an unknown type."""


def plan_text(plan: Mapping[str, str]) -> str:
    """A plan (source type name → target type name) as one canonical string, e.g. "Q5_0>Q4_0"."""
    return ",".join(f"{source}>{target}" for source, target in sorted(plan.items()))


def requantized_from(path: str | Path) -> tuple[str, str] | None:
    """(source sha256, plan text) recorded in a file `requantize` wrote, else None.

    Read with the engine's own header reader (`engine.gguf`, 0.1 s on the chat model): gguf-py's
    reader makes an object of every vocabulary entry (7 s), which every start of the chat model's
    server paid to find it already made."""
    from engine.gguf import read_metadata

    try:
        fields = read_metadata(path).fields  # GGUFError is a ValueError
    except (OSError, ValueError):
        return None
    if SOURCE_KEY not in fields or PLAN_KEY not in fields:
        return None
    return str(fields[SOURCE_KEY]), str(fields[PLAN_KEY])


def requantize(
    source: str | Path, target: str | Path, plan: Mapping[str, str], *, source_sha256: str
) -> Path:
    """Write `target`: `source` with every 2-D tensor whose type is a key of `plan` re-encoded in
    the type it maps to (names of `gguf.GGMLQuantizationType`, e.g. {"Q5_0": "Q4_0"}).

    Written to a temporary file beside `target` and renamed into place when complete, so an
    interrupted run leaves nothing a later one would trust. `source_sha256` (the caller has
    checked it) is recorded with the plan.
    """
    import gguf
    from gguf.quants import dequantize, quantize

    types = _plan_types(plan)
    reader = _model_reader(source)
    architecture = reader.fields["general.architecture"].contents()
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(target) as temporary:
        writer = gguf.GGUFWriter(str(temporary), architecture)
        _copy_metadata(reader, writer)
        writer.add_string(SOURCE_KEY, source_sha256)
        writer.add_string(PLAN_KEY, plan_text(plan))
        # Each tensor's new type and byte shape first (the header), then the data, one tensor at a time.
        layout = _tensor_layout(reader, writer, types)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor, new_type in layout:
            if new_type is None:
                writer.write_tensor_data(tensor.data)
            else:
                values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
                writer.write_tensor_data(quantize(values, new_type))
        writer.close()
    return target


def _plan_types(plan: Mapping[str, str]) -> dict[GGMLQuantizationType, GGMLQuantizationType]:
    """The plan as {source `GGMLQuantizationType`: target type}; an unknown name is a RequantizeError."""
    import gguf

    types = {}
    for source_name, target_name in plan.items():
        try:
            types[gguf.GGMLQuantizationType[source_name]] = gguf.GGMLQuantizationType[target_name]
        except KeyError as exc:
            raise RequantizeError(
                f"unknown quantization type {exc.args[0]!r} in the plan {plan_text(plan)}"
            ) from None
    return types


def _model_reader(source: str | Path) -> GGUFReader:
    """A `gguf.GGUFReader` of `source`, which must be a model GGUF (it names its architecture)."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(source))
    except (OSError, ValueError) as exc:
        raise RequantizeError(f"{Path(source).name} is not a readable GGUF file: {exc}") from exc
    if "general.architecture" not in reader.fields:
        raise RequantizeError(f"{Path(source).name} has no general.architecture: not a model GGUF")
    return reader


def _copy_metadata(reader: GGUFReader, writer: GGUFWriter) -> None:
    """Every key of the source but those GGUFWriter writes itself and ours (set by `requantize`)."""
    import gguf

    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF.") or field.name in (
                SOURCE_KEY, PLAN_KEY):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)


def _tensor_layout(
    reader: GGUFReader, writer: GGUFWriter, types: dict[GGMLQuantizationType, GGMLQuantizationType]
) -> list[tuple[ReaderTensor, GGMLQuantizationType | None]]:
    """Add each tensor's info to `writer`: its new type and byte shape where the plan re-encodes it,
    else as it is → [(tensor, new type or None)] in the file's order."""
    import gguf

    layout = []
    for tensor in reader.tensors:
        new_type = types.get(tensor.tensor_type) if len(tensor.shape) == 2 else None
        if new_type is None:
            layout.append((tensor, None))
            writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                                   tensor.tensor_type)
            continue
        shape = tuple(int(n) for n in reversed(tensor.shape))  # rows, columns (numpy order)
        byte_shape = gguf.quant_shape_to_byte_shape(shape, new_type)
        layout.append((tensor, new_type))
        writer.add_tensor_info(
            tensor.name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), new_type
        )
    return layout
