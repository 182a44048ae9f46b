"""What ``semijoin bench --changes`` reads back after a run (:mod:`.changes`): R's history over
the run, each change's staleness, and whether every output row carries the value R had at the
version its micro-batch read.

R's history comes from the capture triggers' own tables, not from the writer's word: the
before-images (``<R>__sj_before``: a key's row just before each version) of the versions the run
added, and R's rows now. The value of key k at version V is then the before-image of k's first
version after V, or R's value now if k changed no more after V (:meth:`History.value_at`), and
the value a version installed is the value at that version (how the writer's commits find their
version: :meth:`History.versions_of`).

A change c (key k, new value, committed at t_c, version v_c) is *seen* by an output row of key k
that carries its value or a newer one of k (the row's value is k's value at a version >= v_c);
its staleness is the end of the first micro-batch that emitted such a row (its progress record's
``time``, when its rows reached the sinks) minus t_c. Its *visibility* is the end of the first
micro-batch that read a version >= v_c, whatever keys it emitted, minus t_c: what the join
promises, apart from when a tuple of k happens to come. A change never seen either had no tuple
of its key leave the join after its commit (``unprobed``: a cold key) or only ones that read an
older version (``older_reads``: the last micro-batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .spark_window import BatchWindow, sink_columns
from ..core.metrics import latency_ms
from ..core.stores import DatabaseURL
from ..core.stores.versions import before_table

KEY_BITS = 32  # versions below 2**32: (key << 32) | version orders by key, then version
IN_LIST = 1000  # keys in one IN list when R's current values are read


@dataclass
class History:
    """The values of the keys a run changed: ``composite`` (key << 32 | version, sorted) with
    ``before`` (the key's value just before that version), and each changed key's value now."""

    v0: int
    composite: np.ndarray
    before: np.ndarray
    keys_now: np.ndarray  # sorted distinct changed keys
    values_now: np.ndarray

    @classmethod
    def read(cls, url: str, table: str, key: str, column: str, v0: int) -> History:
        """The before-images of the versions after ``v0`` and the changed keys' values now."""
        db = DatabaseURL.parse(url)
        q, p = db.dialect.quote, db.dialect.param
        connection = db.connect()
        try:
            cursor = connection.cursor()
            cursor.execute(f"SELECT version, {q(key)}, {q(column)} FROM {q(before_table(table))} WHERE version > {p}",
                           (int(v0),))
            before = np.array(cursor.fetchall() or np.zeros((0, 3)), dtype=np.float64).reshape(-1, 3)
            keys = np.unique(before[:, 1].astype(np.int64))
            now = []
            for i in range(0, len(keys), IN_LIST):
                chunk = [int(k) for k in keys[i:i + IN_LIST]]
                cursor.execute(f"SELECT {q(key)}, {q(column)} FROM {q(table)} WHERE {q(key)} IN "
                               f"({db.dialect.placeholders(len(chunk))})", tuple(chunk))
                now += list(cursor.fetchall())
            cursor.close()
        finally:
            connection.close()
        now_rows = np.array(now, dtype=np.float64).reshape(-1, 2)
        order = np.argsort(now_rows[:, 0], kind="stable")
        composite = (before[:, 1].astype(np.int64) << KEY_BITS) | before[:, 0].astype(np.int64)
        by_key = np.argsort(composite, kind="stable")
        return cls(int(v0), composite[by_key], before[by_key, 2], now_rows[order, 0].astype(np.int64),
                   now_rows[order, 1])

    def _around(self, keys: np.ndarray, versions: np.ndarray, side_offset: int) -> tuple[np.ndarray, np.ndarray]:
        """Index of each key's first version after ``versions`` (``side_offset`` 0) or last one
        at or before it (-1), and whether the key has one there."""
        keys, versions = keys.astype(np.int64), versions.astype(np.int64)
        at = np.searchsorted(self.composite, (keys << KEY_BITS) | versions, side="right") + side_offset
        found = (at >= 0) & (at < len(self.composite))
        found[found] = (self.composite[at[found]] >> KEY_BITS) == keys[found]
        return np.where(found, at, 0), found

    def value_at(self, keys: np.ndarray, versions: np.ndarray) -> np.ndarray:
        """Each key's value at its version (keys the run changed; NaN for others)."""
        if not len(self.composite):
            return np.full(len(keys), np.nan)
        at, found = self._around(keys, versions, 0)
        now = np.searchsorted(self.keys_now, keys).clip(0, len(self.keys_now) - 1)
        now_values = np.where(self.keys_now[now] == keys, self.values_now[now], np.nan)
        return np.where(found, self.before[at], now_values)

    def last_version(self, keys: np.ndarray, versions: np.ndarray) -> np.ndarray:
        """Each key's newest version at or before its version (``v0``: none in the run)."""
        if not len(self.composite):
            return np.full(len(keys), self.v0, np.int64)
        at, found = self._around(keys, versions, -1)
        return np.where(found, self.composite[at] & ((1 << KEY_BITS) - 1), self.v0)

    def versions_of(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The version that installed each (key, value) of the run (``v0``: the key's value
        before the run; -1: no version did)."""
        keys_v = self.composite >> KEY_BITS
        versions = self.composite & ((1 << KEY_BITS) - 1)
        starts = self.value_at(self.keys_now, np.full(len(self.keys_now), self.v0))
        pairs = zip(zip(np.concatenate([keys_v, self.keys_now]).tolist(),
                        np.concatenate([self.value_at(keys_v, versions), starts]).tolist()),
                    np.concatenate([versions, np.full(len(self.keys_now), self.v0)]).tolist())
        found = dict(pairs)
        return np.array([found.get((k, v), -1) for k, v in zip(keys.tolist(), values.tolist())], np.int64)


@dataclass
class Emitted:
    """The output rows of the changed keys: key, value, the micro-batch's end and read version."""

    keys: np.ndarray
    values: np.ndarray
    times: np.ndarray
    versions: np.ndarray
    batch_ids: np.ndarray


def emitted_rows(out, window: BatchWindow, changed: np.ndarray, key: str, column: str) -> Emitted:
    """Every matched row of a changed key that the run's micro-batches wrote, with its batch's
    end and the version it read (the progress record's ``master_versions``)."""
    parts, wanted = [], pa.array(changed)
    for record in window.records:
        rows = sink_columns(out / "matched", [record["batch_id"]], [key, column])
        if not rows.num_rows:
            continue
        rows = rows.filter(pc.is_in(rows[key], value_set=wanted))
        n = rows.num_rows
        version = (record.get("master_versions") or [0])[0]
        parts.append((rows[key].to_numpy(), rows[column].to_numpy(), np.full(n, record["time"]),
                      np.full(n, version, np.int64), np.full(n, record["batch_id"], np.int64)))
    if not parts:
        empty = np.zeros(0)
        return Emitted(empty.astype(np.int64), empty, empty, empty.astype(np.int64), empty.astype(np.int64))
    return Emitted(*(np.concatenate(columns) for columns in zip(*parts)))


def version_check(history: History, rows: Emitted) -> dict:
    """Every output row of a changed key carries the value R had at the version its micro-batch
    read; of the rows that do not: ``older`` carry a value of an older version of R, ``newer``
    one of a newer version, ``unknown`` a value R never had in the run."""
    expected = history.value_at(rows.keys, rows.versions)
    wrong = np.flatnonzero(rows.values != expected)
    carried = history.versions_of(rows.keys[wrong], rows.values[wrong])
    should = history.last_version(rows.keys[wrong], rows.versions[wrong])
    example = None
    if len(wrong):
        first = wrong[0]
        example = {"key": int(rows.keys[first]), "batch_id": int(rows.batch_ids[first]),
                   "read_version": int(rows.versions[first]), "value": float(rows.values[first]),
                   "expected": float(expected[first]), "value_of_version": int(carried[0])}
    return {"ok": not len(wrong), "rows_checked": int(len(expected)), "wrong": int(len(wrong)),
            "older": int(((carried >= 0) & (carried < should)).sum()), "newer": int((carried > should).sum()),
            "unknown": int((carried < 0).sum()), "first_wrong": example}


def staleness(history: History, writes: dict, rows: Emitted, window: BatchWindow) -> dict:
    """The staleness and visibility of the writer's changes committed in the window (see the
    module's doc), and how many of them were seen; ``uncaptured``: commits that no version holds."""
    keys, values, committed = writes["keys"], writes["values"], writes["commit_times"]
    versions = history.versions_of(keys, values)
    opened = window.opened_at if window.opened is not None else np.inf
    closed = window.records[window.closed]["time"] if window.closed is not None else np.inf
    inside = (committed >= opened) & (committed <= closed)
    good = rows.values == history.value_at(rows.keys, rows.versions)
    seen_at = _first_seen(keys, versions, history.last_version(rows.keys[good], rows.versions[good]),
                          rows.keys[good], rows.times[good])
    later = _last_emitted(keys, rows.keys, rows.times)
    seen = np.isfinite(seen_at)
    visible_at, late = _visible(versions, committed, window)
    w = inside & (versions >= 0)
    return {
        "committed": int(len(keys)),
        "committed_in_window": int(inside.sum()),
        "uncaptured": int((versions < 0).sum()),
        "seen": int((w & seen).sum()),
        "unprobed": int((w & ~seen & (later <= committed)).sum()),
        "older_reads": int((w & ~seen & (later > committed)).sum()),
        "staleness_ms": latency_ms(seen_at[w & seen] - committed[w & seen]),
        "visibility_ms": latency_ms((visible_at - committed)[w & np.isfinite(visible_at)]),
        "visible_batches_late_max": int(late[w & np.isfinite(visible_at)].max(initial=0)),
        "read_versions_monotone": _monotone(window),
        "changed_key_rows": _share(len(rows.keys), sum(r["matched"] for r in window.records)),
    }


def _first_seen(keys, versions, row_versions, row_keys, row_times) -> np.ndarray:
    """For each change (key, version): the first end of a micro-batch that emitted a row of the
    key at that version or a newer one (inf: none)."""
    if not len(row_keys):
        return np.full(len(keys), np.inf)
    grouped = (pd.DataFrame({"k": row_keys, "v": row_versions, "t": row_times})
               .groupby(["k", "v"], sort=True)["t"].min().reset_index())
    by_key = {}
    for k, part in grouped.groupby("k", sort=False):
        v, t = part["v"].to_numpy(), part["t"].to_numpy()
        by_key[k] = (v, np.minimum.accumulate(t[::-1])[::-1])  # earliest at this version or newer
    seen = np.full(len(keys), np.inf)
    for i, (k, version) in enumerate(zip(keys.tolist(), versions.tolist())):
        if k in by_key and version >= 0:
            v, t = by_key[k]
            at = np.searchsorted(v, version, side="left")
            if at < len(v):
                seen[i] = t[at]
    return seen


def _last_emitted(keys, row_keys, row_times) -> np.ndarray:
    """The last end of a micro-batch that emitted a row of each key (-inf: none)."""
    if not len(row_keys):
        return np.full(len(keys), -np.inf)
    last = pd.Series(row_times).groupby(row_keys).max()
    return last.reindex(keys).fillna(-np.inf).to_numpy()


def _read_versions(window: BatchWindow) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each micro-batch's read version (-1: none), start and end."""
    records = window.records
    read = np.array([(r.get("master_versions") or [-1])[0] for r in records], np.int64)
    ends = np.array([r["time"] for r in records])
    starts = ends - np.array([r.get("batch_duration_s") or 0.0 for r in records])
    return read, starts, ends


def _visible(versions, committed, window: BatchWindow) -> tuple[np.ndarray, np.ndarray]:
    """For each change: the first end of a micro-batch that read a version >= its own (inf:
    none did), and how many micro-batches after the first one that started after its commit
    that one was (0: the first to start after the commit already read it; the README promises
    the next micro-batch, or the one after when the join worked ahead)."""
    read, starts, ends = _read_versions(window)
    if not len(read):
        return np.full(len(versions), np.inf), np.zeros(len(versions), np.int64)
    at = np.searchsorted(np.maximum.accumulate(read), versions, side="left")
    found = (at < len(read)) & (versions >= 0)
    late = at - np.searchsorted(starts, committed, side="right")
    return np.where(found, ends[at.clip(0, len(read) - 1)], np.inf), late


def _monotone(window: BatchWindow) -> bool:
    """Whether no micro-batch read an older version of R than one before it."""
    read = _read_versions(window)[0]
    read = read[read >= 0]
    return bool(np.all(np.diff(read) >= 0))


def _share(part: int, whole: int) -> float | None:
    """The share of the output rows whose key the run changed: how hot the changed keys were."""
    return round(part / whole, 3) if whole else None
