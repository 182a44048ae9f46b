"""A producer for a Redis stream: the generator's rows (:func:`.stream.generator_rows`) as stream
entries, one field per column as text, written with pipelined XADDs - at once (:func:`fill`) or
at a rate (:func:`feed`, the producer of ``semijoin demo --source redis``).

A row's fields are its columns' values as Arrow casts them to text (a timestamp as ISO 8601 with
its zone, ``2026-01-01 00:00:00.000000Z``); a null leaves its field out of the entry, which the
source then sends to the dead letter (``missing_field``).
"""

from __future__ import annotations

import time
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from .stream import generator_rows

XADD_PIPELINE = 2000  # entries a pipeline carries


def entries(rows: pa.Table) -> list[dict]:
    """``rows`` as stream entries: a mapping of field name to text a row, nulls left out."""
    names = rows.column_names
    columns = [pc.cast(rows[name], pa.string()).to_pylist() for name in names]
    return [{name: value for name, value in zip(names, values) if value is not None} for values in zip(*columns)]


def fill(client, stream: str, rows: pa.Table) -> list[bytes]:
    """Add ``rows`` to ``stream`` now (ids from Redis' clock); their entry ids."""
    ids = []
    items = entries(rows)
    for i in range(0, len(items), XADD_PIPELINE):
        pipe = client.pipeline(transaction=False)
        for entry in items[i:i + XADD_PIPELINE]:
            pipe.xadd(stream, entry)
        ids += pipe.execute()
    return ids


def feed(client, stream: str, settings: dict, rows_per_second: float, *, stop: Callable[[], bool] = lambda: False,
         step_s: float = 0.1, clock=time.monotonic, sleep=time.sleep) -> int:
    """Add the generator's rows (``settings`` as :meth:`...job.sources.GeneratorSource.settings`
    gives them; ``total_rows`` of them) to ``stream`` at ``rows_per_second``, a step of rows every
    ``step_s``, until they are all in or ``stop()``; the rows added."""
    total, done, started = settings["total_rows"], 0, clock()
    while done < total and not stop():
        due = min(total, int((clock() - started) * rows_per_second) + 1)
        if due > done:
            fill(client, stream, generator_rows(settings, done, due))
            done = due
        sleep(step_s)
    return done
