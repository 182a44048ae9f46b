"""The bytes of a carried tuple's row that a step's plan counts before its first micro-batch.

A step's memory holds the algorithm's structures and the rows of the tuples inside the join
(:class:`..spark.joinstate.CarriedRows`), so a plan made before any row is seen - the Spark
step's, ``algorithm: auto``'s, the memory split a task publishes - needs a row's width: known
exactly where the rows spill to the mapped state file (:data:`SPILLED_ROW_BYTES`), else
estimated from the job's spec (:func:`estimated_row_bytes`). Pure: it reads the spec, never a row.
"""

from __future__ import annotations

import re

JOIN_COLUMN_BYTES = 8 + 8 + 4  # what the join columns add to a carried row (sj_seq int64, sj_due float64, sj_part int32)
DEADLINE_BYTES = 8  # what a job's deadline adds to it (sj_deadline: float64)
SPILLED_ROW_BYTES = 8 + 1  # memory per carried tuple whose row is in the mapped state file: sj_seq looked up, alive flag
STRING_BYTES = 16  # a string value not seen yet: its 4-byte offset and 12 characters
UNKNOWN_ROW_BYTES = 64  # a stream row whose schema is not given (inferred by Spark later): 8 columns of 8 bytes
DDL_TYPE_BYTES = {"BOOLEAN": 1, "TINYINT": 1, "BYTE": 1, "SMALLINT": 2, "SHORT": 2, "INT": 4, "INTEGER": 4, "DATE": 4,
                  "FLOAT": 4, "REAL": 4, "BIGINT": 8, "LONG": 8, "DOUBLE": 8, "TIMESTAMP": 8, "TIMESTAMP_NTZ": 8,
                  "DECIMAL": 16}


def ddl_row_bytes(ddl: str) -> float:
    """The bytes of one row of a Spark DDL schema (``"tid BIGINT, nk STRING"``) in Arrow:
    fixed-width types at their width, strings and anything else at :data:`STRING_BYTES`."""
    columns = re.split(r",(?![^(<]*[)>])", ddl)  # commas outside DECIMAL(10,2) and ARRAY<...>
    total = 0
    for column in columns:
        parts = column.split()
        type_name = re.split(r"[(<]", parts[1])[0].upper() if len(parts) > 1 else ""
        total += DDL_TYPE_BYTES.get(type_name, STRING_BYTES)
    return float(total)


def planned_row_bytes(retries: bool, estimated: float) -> float:
    """The bytes of a carried tuple's row a step's plan counts before its first micro-batch:
    :data:`SPILLED_ROW_BYTES` where the rows spill (the step sizes its algorithm for them at
    its start), else ``estimated`` (the step sizes it for the width of its first rows): a step
    that ``retries`` (:attr:`.spec.StepSpec.retries`) keeps its rows in memory, since its
    held rows share the state file with another schema."""
    return float(estimated) if retries else float(SPILLED_ROW_BYTES)


def estimated_row_bytes(source, added_columns: int, deadline: bool = False) -> float:
    """A carried row's bytes in a step, before its first micro-batch shows them: the stream's
    columns (``source``, a :class:`.sources.SourceSpec`), ``added_columns`` that earlier steps
    joined on (surrogate keys: 8 bytes each), the tuple's id as text and arrival time, the join's
    own columns, and with the job's ``deadline`` each tuple's
    (:func:`..spark.joinstate.with_deadlines`). ``algorithm: auto`` and the task's published
    memory split use it (:func:`planned_row_bytes`); a step whose rows do not spill sizes its
    algorithm from the rows of its first micro-batch."""
    ddl = source.stream_ddl  # its sj_arrival included
    stream = ddl_row_bytes(ddl) if ddl is not None else UNKNOWN_ROW_BYTES + 8  # + sj_arrival
    id_bytes = STRING_BYTES if source.tuple_id_column else 2 * STRING_BYTES  # else '<file>#<row>'
    return float(stream + 8 * added_columns + id_bytes + JOIN_COLUMN_BYTES + (DEADLINE_BYTES if deadline else 0))
