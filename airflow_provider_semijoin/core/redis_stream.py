"""A Redis stream as a source of stream tuples: its entry ids as offsets, its entries read with
XRANGE and decoded columnar (no pyspark here: :mod:`..spark.redis_source` is the Spark side).

Offsets are ``{"id": "<ms>-<seq>", "row": n, "base": b}``: the last entry id read, the entries the
job has read since its start (``row``), and the stream's ``entries-added`` counter before its
first entry (``base``, so ``base + row`` is the count of entries ever added up to ``id``). They
live in Spark's checkpoint; consumer groups and acknowledgements play no part. A new job's first
micro-batch reads nothing: it fixes where the job starts (:meth:`Planner.first_end`, ``earliest``:
before the stream's first entry, ``latest``: after its last) and warms Spark's Python workers.

Planning costs one XINFO STREAM (its ``entries-added``, ``last-generated-id`` and
``max-deleted-entry-id`` are read at once) while the backlog fits in one micro-batch; a larger
backlog is cut at its ``limit``-th entry, found by reading the ids ahead with XRANGE (:meth:`Planner.walk`),
which also gives the cut ids that split a micro-batch into parallel reads; in a backlog the next
micro-batch's walk runs on a thread while the current one is read and joined.

An entry the job has not read yet that is deleted (XTRIM, MAXLEN, XDEL) is a loss no replay can
undo: planning checks the stream's ``entries-added``, ``length`` and ``max-deleted-entry-id``
against the offset (:func:`check_kept`), reading each range's count, and either raises
:class:`EntriesLost`, one sentence, which stops the job (see the README).

:func:`decode` turns XRANGE's entries into an Arrow batch of the schema's columns: ``sj_id`` (the
entry id), the typed fields, and for an entry whose field is missing or not of its type, the
entry as JSON in ``_corrupt_record`` and why in ``_corrupt_reason`` (``missing_field``,
``bad_field``): such an entry goes to the dead letter, the stream goes on.
"""

from __future__ import annotations

import gc
import json
import re
import threading
from dataclasses import dataclass
from itertools import chain
from typing import Callable
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import ConfigError, SemiJoinError, shown
from .reasons import BAD_FIELD, CORRUPT_COLUMN, CORRUPT_REASON, MISSING_FIELD
from .stores.reconnect import RetryPolicy
from .stores.sql import redact

REDIS_TYPES = {  # the types a field of an entry can be read as (Spark DDL name -> Arrow type)
    "STRING": pa.string(), "BIGINT": pa.int64(), "INT": pa.int32(), "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(), "TIMESTAMP": pa.timestamp("us", "UTC"),
}
READ_CHUNK = 10_000  # entries an XRANGE asks for (COUNT): a reply of a few MB
READ_PARTITION_ROWS = 50_000  # entries a read task takes at most (a task costs Spark's Python worker some 35 ms)
PIPELINE_CHUNKS = 4  # XRANGEs a read sends as one pipeline: replies of tens of MB at most
_NUMBERS = {
    "BIGINT": r"^[+-]?[0-9]{1,19}$",
    "INT": r"^[+-]?[0-9]{1,10}$",
    "DOUBLE": r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?(?i:inf|infinity|nan)$",
    "BOOLEAN": r"^(?i:true|false)$",
    "TIMESTAMP": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?(Z|[+-][0-9]{2}:[0-9]{2})?$",
}
_ZONE = re.compile(r"(Z|[+-][0-9]{2}:[0-9]{2})$")


class EntriesLost(SemiJoinError):
    """Entries the job has not read yet were deleted from the stream."""


class SourceUnavailable(SemiJoinError):
    """The Redis server stayed unreachable longer than the retry bound."""


def parse_id(text) -> tuple[int, int]:
    """An entry id (``"<ms>-<seq>"``, bytes or text) as a pair of integers."""
    ms, _, seq = (text.decode() if isinstance(text, bytes) else text).partition("-")
    return int(ms), int(seq or 0)


def id_text(entry_id: tuple[int, int]) -> str:
    return f"{entry_id[0]}-{entry_id[1]}"


def id_before(entry_id: tuple[int, int]) -> tuple[int, int]:
    """The greatest id below ``entry_id`` (an id no entry can take again)."""
    ms, seq = entry_id
    return (ms, seq - 1) if seq else (ms - 1, 2**64 - 1) if ms else (0, 0)


def check_url(url) -> tuple[str, int, int]:
    """``redis://[[user]:password@]host[:port][/db]`` (or ``rediss://``, TLS): its host, port and db."""
    parts = urlsplit(url) if isinstance(url, str) else None
    try:
        ok = parts is not None and parts.scheme in ("redis", "rediss") and bool(parts.hostname)
        port, db = (parts.port or 6379, int(parts.path.strip("/") or 0)) if ok else (0, 0)
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"url: {shown(redact(url) if isinstance(url, str) else url)} is not a Redis URL such as "
                          "redis://127.0.0.1:6379/0")
    return parts.hostname, port, db


@dataclass(frozen=True)
class StreamInfo:
    first: tuple[int, int] | None  # the first entry's id (None: empty)
    last: tuple[int, int]  # last-generated-id
    added: int  # entries-added
    length: int
    max_deleted: tuple[int, int]


class Connection:
    """A Redis client on ``url`` whose calls retry a lost server for ``retry_max_s`` seconds (a
    restart, a failover, a network blip), then raise :class:`SourceUnavailable`. The replies of
    XRANGE are left raw (lists of bytes): :func:`decode` reads them columnar."""

    def __init__(self, url: str, retry_max_s: float):
        import redis

        check_url(url)
        self.url = url
        self.policy = RetryPolicy(retry_max_s)
        self.client = redis.Redis.from_url(url, socket_timeout=60, socket_connect_timeout=10)
        self.client.response_callbacks.pop("XRANGE", None)
        self._lost = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)

    def call(self, what: Callable):
        """``what(client)``, retried with backoff while the server is unreachable."""
        policy, started, wait = self.policy, None, self.policy.first_s
        while True:
            try:
                return what(self.client)
            except self._lost as exc:
                started = policy.clock() if started is None else started
                if policy.clock() - started >= policy.max_s:
                    raise SourceUnavailable(
                        f"source.url: the Redis server at {redact(self.url)} did not answer for {policy.max_s:g} s "
                        f"({type(exc).__name__}: {str(exc)[:120]}); raise db_retry_max_s to wait longer") from None
                policy.sleep(wait)
                wait = min(wait * policy.factor, policy.cap_s)

    def info(self, stream: str) -> StreamInfo | None:
        """The stream's figures (one XINFO STREAM), None while the key does not exist."""
        import redis

        try:
            reply = self.call(lambda c: c.execute_command("XINFO", "STREAM", stream))
        except redis.ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise ConfigError(f"source.stream: key {shown(stream)} is not a stream ({exc})") from None
        fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}
        first = fields.get("first-entry")
        return StreamInfo(parse_id(first[0]) if first else None, parse_id(fields["last-generated-id"]),
                          int(fields["entries-added"]), int(fields["length"]), parse_id(fields["max-deleted-entry-id"]))

    def xrange(self, stream: str, after: tuple[int, int], until: tuple[int, int] | str, count: int) -> list:
        until = until if isinstance(until, str) else id_text(until)
        return self.call(lambda c: c.execute_command("XRANGE", stream, "(" + id_text(after), until, "COUNT", count))

    def ranges(self, stream: str, chunks: list[tuple[tuple[int, int], tuple[int, int], int]]) -> list:
        """The entries of each ``(after, until, count)`` chunk, the XRANGEs sent as one pipeline."""
        def send(client):
            pipe = client.pipeline(transaction=False)
            for after, until, count in chunks:
                pipe.execute_command("XRANGE", stream, "(" + id_text(after), id_text(until), "COUNT", count)
            return pipe.execute()
        return list(chain.from_iterable(self.call(send)))


def lost_sentence(stream: str, after: tuple[int, int], why: str) -> str:
    return (f"source.stream: entries of Redis stream {shown(stream)} after id {id_text(after)}, which the job has not "
            f"read yet, were deleted ({why}: trimmed by XTRIM/MAXLEN or XDEL); the job stops rather than skip them "
            "(keep the stream longer, or start a new checkpoint at start: latest)")


def check_kept(stream: str, info: StreamInfo, start: dict) -> None:
    """Raise :class:`EntriesLost` when an entry after the offset ``start`` is gone: trimmed (XTRIM
    and MAXLEN remove the oldest entries: more are gone, ``entries-added`` - ``length``, than the
    job has read, ``base`` + ``row``) or deleted (XDEL: ``max-deleted-entry-id`` after it)."""
    after, read = parse_id(start["id"]), start["base"] + start["row"]
    if info.added - info.length > read:
        why = f"{info.added - info.length - read} of them, the stream's first entry now {id_text(info.first or info.last)}"
        raise EntriesLost(lost_sentence(stream, after, why))
    if info.max_deleted > after:
        raise EntriesLost(lost_sentence(stream, after, f"the stream's max-deleted-entry-id is {id_text(info.max_deleted)}"))


@dataclass
class Planner:
    """Offsets and read ranges of one stream (the driver's side of :mod:`..spark.redis_source`)."""

    connection: Connection
    stream: str
    start: str = "earliest"
    total_rows: int | None = None
    chunk: int = READ_CHUNK
    partition_rows: int = READ_PARTITION_ROWS

    def __post_init__(self):
        self._walked: dict = {}  # (after, rows) -> cut ids (each chunk's last id and count): this batch's, the next's
        self._lock = threading.Lock()
        self._ahead: tuple[tuple, threading.Thread] | None = None  # the next batch's walk, under way

    def first_end(self, info: StreamInfo) -> dict:
        """The end of the first, empty micro-batch: where the job starts."""
        if self.start == "latest" or info.first is None:
            return {"id": id_text(info.last), "row": 0, "base": info.added}
        if info.max_deleted >= info.first:  # the positions of its entries are not known: nor what a trim took
            raise ConfigError(f"source.start: earliest cannot count the entries of Redis stream {shown(self.stream)}, "
                              f"some of which were deleted (XDEL, up to id {id_text(info.max_deleted)}); expected start: "
                              "latest, or a stream without deleted entries")
        return {"id": id_text(id_before(info.first)), "row": 0, "base": info.added - info.length}

    def latest(self, start: dict, max_rows: int | None) -> dict:
        """The end offset of the next micro-batch from ``start``: at most ``max_rows`` entries
        (None: all there are) and at most ``total_rows`` in all; ``start`` when there is none."""
        info = self.connection.info(self.stream)
        if info is None:
            return start
        if start["base"] is None:
            return self.first_end(info)
        after = parse_id(start["id"])
        check_kept(self.stream, info, start)
        available = info.added - start["base"] - start["row"]
        bounds = (available, max_rows, None if self.total_rows is None else self.total_rows - start["row"])
        rows = min(n for n in bounds if n is not None)
        if rows <= 0:
            return start
        if rows == available:
            return {**start, "id": id_text(info.last), "row": start["row"] + rows}
        end = self.walk(after, rows)[-1][0]
        self._walk_ahead(end, rows)
        return {**start, "id": id_text(end), "row": start["row"] + rows}

    def walk(self, after: tuple[int, int], rows: int) -> list[tuple[tuple[int, int], int]]:
        """The ``rows`` entries after ``after`` as chunks: each chunk's last id and its count
        (their ids read ahead with XRANGE; planned ahead by :meth:`_walk_ahead`, or now)."""
        key = (after, rows)
        if self._ahead is not None and self._ahead[0] == key:
            self._ahead[1].join()
        with self._lock:
            cuts = self._walked.get(key)
        if cuts is None:
            cuts = self._cuts(after, rows)
            self._keep(key, cuts)
        return cuts

    def _walk_ahead(self, after: tuple[int, int], rows: int) -> None:
        """In a backlog, walk the next micro-batch's entries on a thread while this one is read and
        joined: Spark plans a micro-batch only once the one before has committed. A walk that fails
        is left for the next plan to do again, and say why."""
        def walk() -> None:
            try:
                self._keep((after, rows), self._cuts(after, rows))
            except SemiJoinError:
                pass
        thread = threading.Thread(target=walk, name="semijoin-redis-walk", daemon=True)
        self._ahead = ((after, rows), thread)
        thread.start()

    def _keep(self, key: tuple, cuts: list) -> None:
        with self._lock:  # the walks from this key on (older ones are planned and done)
            self._walked = {k: v for k, v in self._walked.items() if k[0] >= key[0]} | {key: cuts}

    def _cuts(self, after: tuple[int, int], rows: int) -> list[tuple[tuple[int, int], int]]:
        cuts, last, left = [], after, rows
        while left > 0:
            entries = with_gc_off(lambda: self.connection.xrange(self.stream, last, "+", min(self.chunk, left)))
            if not entries:
                raise EntriesLost(lost_sentence(self.stream, after, f"{rows - left} of {rows} entries are left"))
            last, left = parse_id(entries[-1][0]), left - len(entries)
            cuts.append((last, len(entries)))
        return cuts

    def partitions(self, start: dict, end: dict) -> list[list[tuple[tuple[int, int], tuple[int, int], int]]]:
        """The read tasks of the micro-batch ``(start, end]``: each a list of ``(after, until, count)``
        chunks. An empty list: nothing to read; one empty task: the first micro-batch."""
        if start["base"] is None:
            return [[]]
        rows = end["row"] - start["row"]
        if rows <= 0:
            return []
        after = parse_id(start["id"])
        info = self.connection.info(self.stream)  # a replay: what it reads may have been trimmed since
        if info is None:
            raise EntriesLost(lost_sentence(self.stream, after, "the stream no longer exists"))
        check_kept(self.stream, info, start)
        cuts = self.walk(after, rows) if rows > self.partition_rows else [(parse_id(end["id"]), rows)]
        if cuts[-1][0] != parse_id(end["id"]):
            raise EntriesLost(lost_sentence(self.stream, after, f"entry {end['id']} is no longer the {rows}th after it"))
        tasks, task, taken, low = [], [], 0, after
        for until, count in cuts:
            task.append((low, until, count))
            low, taken = until, taken + count
            if taken >= self.partition_rows:
                tasks.append(task)
                task, taken = [], 0
        return tasks + ([task] if task else [])


def with_gc_off(call: Callable):
    """``call()`` with the cyclic garbage collector paused: a reply of a million small objects
    otherwise sets off collections that cost more than the parse."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return call()
    finally:
        if enabled:
            gc.enable()


def read_task(connection: Connection, stream: str, chunks: list, fields: list[tuple[str, str]]) -> pa.RecordBatch:
    """One read task's entries (:meth:`Planner.partitions`), decoded; every chunk must come whole."""
    if not chunks:
        return decode([], fields)
    rows = []
    for i in range(0, len(chunks), PIPELINE_CHUNKS):
        rows += with_gc_off(lambda: connection.ranges(stream, chunks[i:i + PIPELINE_CHUNKS]))
    planned = sum(count for _, _, count in chunks)
    if len(rows) != planned:
        raise EntriesLost(lost_sentence(stream, chunks[0][0], f"{planned - len(rows)} of the {planned} entries up to "
                                                              f"{id_text(chunks[-1][1])} are gone"))
    return with_gc_off(lambda: decode(rows, fields))


# -- decoding -------------------------------------------------------------------------------------
def decode(entries: list, fields: list[tuple[str, str]]) -> pa.RecordBatch:
    """XRANGE's raw entries (``[id, [field, value, ...]]``) as ``sj_id``, the ``fields`` (name,
    type of :data:`REDIS_TYPES`) typed, ``_corrupt_record`` and ``_corrupt_reason``."""
    values = field_values(entries, [name.encode() for name, _ in fields])
    columns, missing, bad = {}, np.zeros(len(entries), bool), np.zeros(len(entries), bool)
    problems: dict[int, str] = {}
    for (name, kind), raw in zip(fields, values):
        typed, absent, wrong = typed_column(raw, kind)
        for i in np.flatnonzero(wrong & ~bad & ~missing):
            problems[int(i)] = f"{name}: {shown(raw[int(i)].decode('utf-8', 'replace'))} is not a {kind}"
        for i in np.flatnonzero(absent & ~missing):
            problems[int(i)] = f"{name}: missing"
        columns[name], missing, bad = typed, missing | absent, bad | wrong
    failed = missing | bad
    ids = pa.array([e[0] for e in entries], pa.binary()).cast(pa.string())
    record, reason = [None] * len(entries), [None] * len(entries)
    for i in np.flatnonzero(failed):
        record[i] = json.dumps({"id": ids[i].as_py(), "fields": _texts(entries[i][1]), "problem": problems[int(i)]})
        reason[i] = MISSING_FIELD if missing[i] else BAD_FIELD
    keep = pa.array(~failed)
    arrays = [ids, *(pc.if_else(keep, columns[name], pa.nulls(len(entries), REDIS_TYPES[kind])) for name, kind in fields),
              pa.array(record, pa.string()), pa.array(reason, pa.string())]
    names = ["sj_id", *(name for name, _ in fields), CORRUPT_COLUMN, CORRUPT_REASON]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _texts(pairs: list) -> dict:
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in zip(pairs[::2], pairs[1::2])}


def field_values(entries: list, names: list[bytes]) -> list[list]:
    """Each field's values (None where an entry lacks it). Entries written alike (the same fields
    in the same order, as a producer writes them) are sliced out of one flat list; any other
    layout is read entry by entry."""
    pairs = [e[1] for e in entries]
    widths = set(map(len, pairs))
    if len(widths) == 1:
        width = widths.pop()
        flat = list(chain.from_iterable(pairs))
        found = {}
        for k in range(0, width, 2):
            column = flat[k::width]
            if column.count(column[0]) != len(column):
                break
            found[column[0]] = flat[k + 1::width]
        else:
            return [found.get(name, [None] * len(entries)) for name in names]
    maps = [dict(zip(p[::2], p[1::2])) for p in pairs]
    return [[m.get(name) for m in maps] for name in names]


def typed_column(raw: list, kind: str) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """A field's values as ``kind``, with the entries where it is missing and where it is not of
    that type (their values are nulls)."""
    binary = pa.array(raw, pa.binary())
    absent = binary.is_null().to_numpy(zero_copy_only=False)
    text, wrong = _utf8(binary)
    if kind == "STRING":
        return text, absent, wrong
    ok = pc.fill_null(pc.match_substring_regex(text, _NUMBERS[kind]), False).to_numpy(zero_copy_only=False)
    ok &= ~wrong
    source = pc.if_else(pa.array(ok), text, pa.nulls(len(raw), pa.string()))
    if kind == "BOOLEAN":
        typed = pc.equal(pc.utf8_lower(source), "true")
    else:
        typed, ok = _cast(source, ok, kind)
    return typed, absent, ~absent & ~ok


def _timestamps(source: pa.Array) -> pa.Array:
    """ISO 8601 text as UTC instants (text without a zone is UTC)."""
    text = pc.replace_substring(source, " ", "T", max_replacements=1)
    zoned = pc.fill_null(pc.match_substring_regex(text, _ZONE.pattern), False)
    utc = REDIS_TYPES["TIMESTAMP"]
    with_zone = pc.cast(pc.if_else(zoned, text, pa.nulls(len(text), pa.string())), utc)
    without = pc.cast(pc.if_else(zoned, pa.nulls(len(text), pa.string()), text), pa.timestamp("us")).cast(utc)
    return pc.coalesce(with_zone, without)


def _cast(source: pa.Array, ok: np.ndarray, kind: str) -> tuple[pa.Array, np.ndarray]:
    """Well-formed text as ``kind``; a value out of its range (a BIGINT of 19 digits, a 13th
    month) is wrong like any other, found value by value once the whole column fails."""
    convert = _timestamps if kind == "TIMESTAMP" else lambda values: pc.cast(values, REDIS_TYPES[kind])
    try:
        return convert(source), ok
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = []
        for i, text in enumerate(source.to_pylist()):
            try:
                values.append(None if text is None else convert(pa.array([text], pa.string()))[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                ok[i] = False
                values.append(None)
        return pa.array(values, REDIS_TYPES[kind]), ok


def _utf8(binary: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The values as text, and those that are not UTF-8 (null in the text)."""
    try:
        return binary.cast(pa.string()), np.zeros(len(binary), bool)
    except pa.ArrowInvalid:
        texts, wrong = [], np.zeros(len(binary), bool)
        for i, value in enumerate(binary.to_pylist()):
            try:
                texts.append(None if value is None else value.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(None)
                wrong[i] = True
        return pa.array(texts, pa.string()), wrong
