"""Instants as int64 microseconds since the epoch: the unit of every version bound, arrival time
and deadline the joins compare.

Spark, MariaDB's DATETIME(6) and Python's datetime stop at microseconds, but a stream's file may
carry nanoseconds: pandas writes ``timestamp[ns]`` by default, SQL Server's ``datetime2(7)``
exports 100 ns digits. Such an instant is floored to its microsecond, which is exact wherever it
meets a bound in whole microseconds: for such a bound ``b``, ``t >= b`` iff ``floor(t) >= b``,
so ``[valid_from, valid_to)`` keeps the same tuples. Rounding would not (12:00:00.0000009 is
still before a bound at 12:00:00.000001), nor would truncating towards zero before 1970, and
pyarrow's checked cast refuses the digits outright (``ArrowInvalid: ... would lose data``).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def epoch_micros(values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Timestamps of any unit and zone, or dates, as int64 microseconds since the epoch (UTC),
    nanoseconds floored (towards minus infinity); null stays null.

    The floor is taken on the UTC values, the zone dropped: a floor in local time would have to
    place a wall-clock time an autumn hour has twice, and pyarrow refuses that."""
    data_type = values.type
    if pa.types.is_timestamp(data_type) and data_type.unit == "ns":
        values = pc.floor_temporal(values.cast(pa.timestamp("ns")), unit="microsecond")
    return values.cast(pa.timestamp("us")).cast(pa.int64())
