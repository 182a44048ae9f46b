"""Why a stream tuple left a join unmatched.

Every stream tuple that enters a join leaves exactly once: matched, or unmatched with one of
these reasons. The codes are small integers so unmatched outputs stay columnar (``int8``).
"""

from __future__ import annotations

import enum

import numpy as np


class Unmatched(enum.IntEnum):
    NOT_IN_MASTER = 1  # the key is well formed but R holds no row with it
    NULL_KEY = 2  # the stream tuple's join key is null
    BAD_KEY = 3  # the join key cannot be a key of R (wrong type, not an integer, ...)
    NO_VERSION_VALID = 4  # as-of lookup: R holds the key, but none of its versions is valid at the event time
    NULL_EVENT_TIME = 5  # as-of lookup: the tuple's event time is null

    @property
    def label(self) -> str:
        return self.name.lower()


# Why the source gave no tuple: such a row goes to the dead letter before any join step (step -1),
# with the row as it came in CORRUPT_COLUMN and, where the source says why, the reason in CORRUPT_REASON.
CORRUPT_COLUMN = "_corrupt_record"
CORRUPT_REASON = "_corrupt_reason"
MALFORMED_ROW = "malformed_row"  # a landing file's row its format could not parse (no CORRUPT_REASON)
MISSING_FIELD = "missing_field"  # a Redis stream entry lacks a field of the source's schema
BAD_FIELD = "bad_field"  # a Redis stream entry's field is not of its type in the schema (or not UTF-8 text)

REASON_LABELS = np.array([""] + [r.label for r in Unmatched], dtype=object)


def labels(codes: np.ndarray) -> np.ndarray:
    """Reason codes -> their labels (``not_in_master``, ``null_key``, ``bad_key``, ``no_version_valid``,
    ``null_event_time``)."""
    return REASON_LABELS[np.asarray(codes, dtype=np.int64)]
