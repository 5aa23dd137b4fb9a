"""The bytes of an inlined data file (docs/format.md §2.5): Parquet or an Arrow IPC stream.

From format version 4 a writer inlines a small file as an Arrow IPC stream:
encoding one costs a tenth of a Parquet file's fixed cost (about 10 us
against 90 us for a one-row commit) and decoding one a twentieth, which is
most of what a small commit spends on its data. The two kinds are told apart
by their first bytes: a Parquet file starts with ``PAR1``, an IPC stream
with the continuation marker ``FF FF FF FF``. (Writing an inlined file out as
a Parquet data file is ``mere.data.writer.inlined_as_parquet``.)
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

PARQUET_MAGIC = b"PAR1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"


def is_arrow_stream(data: bytes) -> bool:
    """Whether inlined bytes are an Arrow IPC stream (else they should be Parquet)."""
    return data[:4] == ARROW_STREAM_MAGIC


def inline_kind_error(data: bytes) -> str | None:
    """Why inlined bytes cannot be a data file by their first bytes, or None."""
    if data[:4] in (PARQUET_MAGIC, ARROW_STREAM_MAGIC):
        return None
    return "inline data is neither a Parquet file nor an Arrow IPC stream"


#: The end-of-stream marker an Arrow IPC stream ends with.
ARROW_STREAM_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def arrow_stream_head(schema: pa.Schema) -> bytes | None:
    """The schema message an Arrow stream of ``schema`` starts with, to encode many
    streams of it with ``encode_arrow_stream``; None when its record batches would
    need dictionary messages too (the stream writer then does it all)."""
    if any(_has_dictionary(field.type) for field in schema):
        return None
    return bytes(schema.serialize())


def _has_dictionary(data_type: pa.DataType) -> bool:
    """Whether ``data_type`` is, or nests, a dictionary type."""
    if pa.types.is_dictionary(data_type):
        return True
    return any(_has_dictionary(data_type.field(i).type) for i in range(data_type.num_fields))


def encode_arrow_stream(rows: pa.Table, head: bytes | None = None) -> pa.Buffer:
    """``rows`` as an uncompressed Arrow IPC stream.

    ``head``: ``arrow_stream_head`` of ``rows.schema`` (None: worked out here). The
    stream is the same bytes pyarrow's stream writer writes, at a third of its
    cost for a few rows.
    """
    if head is None:
        head = arrow_stream_head(rows.schema)
    if head is None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        return sink.getvalue()
    return pa.py_buffer(
        b"".join([head, *(b.serialize() for b in rows.to_batches()), ARROW_STREAM_END])
    )


def decode_inlined(data: bytes) -> pa.Table:
    """Every column of inlined bytes, of either kind.

    Raises:
        pyarrow.ArrowInvalid: the bytes do not decode (callers name the file).
    """
    if not is_arrow_stream(data):
        return pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    try:
        rows = pa.ipc.open_stream(data).read_all()
        rows.validate(full=True)  # IPC reading trusts offsets and lengths: damage must not
    except (pa.ArrowException, UnicodeDecodeError, OverflowError) as exc:
        # Damaged streams raise more kinds than ArrowInvalid (a type id out of
        # range, a name that is not UTF-8): all mean bytes that do not decode.
        raise pa.ArrowInvalid(f"the inlined Arrow stream does not decode: {exc}") from exc
    return rows


__all__ = [
    "arrow_stream_head",
    "decode_inlined",
    "encode_arrow_stream",
    "inline_kind_error",
    "is_arrow_stream",
]
