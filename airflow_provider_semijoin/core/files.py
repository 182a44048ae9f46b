"""Read and write Arrow tables as files, choosing the format by the file's suffix.

``.parquet``, ``.csv`` and JSON lines (``.jsonl``, ``.ndjson``, ``.json``: one object per line).
Every failure is a :class:`~.errors.ConfigError` of one sentence naming the option (``what``),
the path and what was expected, so the command line and the Airflow task can show it as it is.

CSV and JSON carry no types: their columns are inferred by pyarrow (``"2024-01-31"`` reads back
as a date, ``"000123"`` as an integer). Pass ``schema=`` to read columns with the types you want.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from .errors import ConfigError, shown

FORMATS = {
    ".parquet": "Parquet",
    ".csv": "CSV",
    ".jsonl": "JSON lines",
    ".ndjson": "JSON lines",
    ".json": "JSON lines",
}
_EXPECTED = ", ".join(FORMATS)

# JSON lines are written in batches of this many rows (bounded memory for Python objects)
_JSON_BATCH_ROWS = 10_000


def file_format(path, *, what: str = "file") -> str:
    """The format name for ``path``'s suffix, or a ConfigError naming ``what``."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        ending = repr(suffix) if suffix else "no suffix"
        prefix = "suffix " if suffix else ""
        raise ConfigError(f"{what}: {shown(str(path))} has {prefix}{ending}; expected one of {_EXPECTED}")
    return FORMATS[suffix]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def read_table(path, *, what: str = "file", schema: pa.Schema | None = None) -> pa.Table:
    """The table stored in ``path`` (format by suffix).

    ``schema``, when given, selects and types the columns: CSV and JSON are parsed with those
    types, Parquet is cast to them.
    """
    fmt = file_format(path, what=what)
    p = Path(path)
    try:
        exists, is_file = p.exists(), p.is_file()
    except OSError as exc:  # ENAMETOOLONG is not swallowed by exists()
        raise ConfigError(f"{what}: {shown(str(path))} is not a file name here ({exc.strerror or exc})") from None
    if not exists:
        raise ConfigError(f"{what}: {shown(str(path))} does not exist (expected a {fmt} file)")
    if not is_file:
        raise ConfigError(f"{what}: {shown(str(path))} is not a file (expected a {fmt} file)")
    try:
        if fmt == "Parquet":
            table = pq.read_table(p, columns=schema.names if schema is not None else None)
            if schema is not None:
                table = table.cast(schema)
        elif fmt == "CSV":
            convert = pa_csv.ConvertOptions(
                column_types=schema,
                include_columns=schema.names if schema is not None else None,
                # pyarrow writes a null as nothing and "" as "": read them back as they were
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            )
            table = pa_csv.read_csv(p, convert_options=convert)
        else:
            parse = pa_json.ParseOptions(
                explicit_schema=schema,
                unexpected_field_behavior="ignore" if schema is not None else "infer",
            )
            table = pa_json.read_json(p, parse_options=parse)
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise ConfigError(
            f"{what}: cannot read {shown(str(path))} as {fmt} ({_first_line(exc)})"
        ) from None
    return table


def _json_default(value):
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    raise TypeError(f"a {type(value).__name__} value cannot be written as JSON")


def write_whole(path, write) -> None:
    """What ``write(partial)`` writes to the path it is given, at ``path`` whole or not at all:
    written beside it under a hidden temporary name, then renamed over it (no fsync: a killed
    process loses nothing the kernel holds, as with Spark's own files)."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_arrow(path, schema: pa.Schema, batches) -> None:
    """Record ``batches`` of ``schema`` as an Arrow IPC file at ``path``, written one at a time."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def write_private_json(path, value, *, default=None) -> None:
    """``value`` as JSON in ``path``, readable by this user only (a spec or summary may name hosts,
    tables, or hold passwords), appearing whole or not at all (:func:`write_whole`)."""

    def write(partial: Path) -> None:
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            json.dump(value, handle, default=default)
            handle.write("\n")

    write_whole(path, write)


def _write_json_lines(path: Path, table: pa.Table) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for batch in table.to_batches(max_chunksize=_JSON_BATCH_ROWS):
            lines = [
                json.dumps(row, default=_json_default, ensure_ascii=False, allow_nan=False)
                for row in batch.to_pylist()
            ]
            if lines:
                out.write("\n".join(lines))
                out.write("\n")


def write_table(path, table: pa.Table, *, what: str = "file") -> None:
    """Write ``table`` to ``path`` (format by suffix), replacing the file if it exists."""
    fmt = file_format(path, what=what)
    p = Path(path)
    try:
        p.is_dir()
    except OSError as exc:
        raise ConfigError(f"{what}: {shown(str(path))} is not a file name here ({exc.strerror or exc})") from None
    if not p.parent.is_dir():
        raise ConfigError(f"{what}: folder {shown(str(p.parent))} of {shown(str(path))} does not exist")
    if p.is_dir():
        raise ConfigError(f"{what}: {shown(str(path))} is a folder (expected a {fmt} file name)")
    try:
        if fmt == "Parquet":
            pq.write_table(table, p)
        elif fmt == "CSV":
            pa_csv.write_csv(table, p)
        else:
            _write_json_lines(p, table)
    except (pa.ArrowException, OSError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{what}: cannot write {shown(str(path))} as {fmt} ({_first_line(exc)})"
        ) from None
