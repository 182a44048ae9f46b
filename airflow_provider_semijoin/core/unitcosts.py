"""The unit costs the cost models price an iteration with (:class:`ComponentCosts`).

Plain data below both the models (:mod:`.costmodel`) and the measurement
(:mod:`.calibration`, which fills it in on the running machine), so neither imports the other.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .checks import check_positive

CACHE_SMALL_LOG2, CACHE_BIG_LOG2 = 10, 18  # sizes of H_R (log2 keys) c_cache is measured at


@dataclass(frozen=True)
class ComponentCosts:
    """Unit costs of the cost models, in seconds, measured by :func:`calibrate`.

    The papers' costs (HYBRIDJOIN Table 1, SSJ Table 1):

    * ``query_s`` S and ``row_s`` T: ``c_IO(rows) = S + T * rows``, one index range load;
    * ``lookup_s``: one index lookup of a key (``key = ?``), INLJ's c_IO(1) (HYBRIDJOIN sec.
      3.2): a range load's S is the wrong price for it (a point lookup costs well under a range
      load's S, and INLJ priced by S was predicted below its measured rate);
    * ``c_H``: per disk-buffer row in the join of a loaded page (probing the disk tuples);
    * ``c_O``: per output tuple of a page join (finding its rows and taking them);
    * ``c_E``: per tuple removed from H_S and Q (:meth:`StreamTable.pop_page`);
    * ``c_S``: per stream tuple read from a stream buffer (:meth:`StreamBuffer.take`);
    * ``c_A``: per tuple added to H_S and Q (page map lookup + :meth:`StreamTable.admit`), and
      ``c_compact`` per tuple added for the arena compactions admissions cause;
    * ``c_F``: per matched tuple whose frequency is checked against the threshold;
    * ``c_cache``: per stream tuple probed in H_R (a miss goes on to the disk phase);
    * ``c_hit``: per H_R hit on top of ``c_cache``: its row taken from the cache as output;
    * ``c_cache_big``, ``c_hit_big``: the same for an H_R of 2^18 keys instead of 2^10
      (:meth:`cache_costs` interpolates between them).

    Engine overheads, seconds per call whatever the number of tuples:

    * ``c_step``, ``c_step_mesh``, ``c_step_inlj``: one outer iteration of HYBRIDJOIN, MESHJOIN
      and INLJ without its per-item work (the disk load itself is ``c_IO``);
    * ``c_pop`` per page popped from H_S, ``c_group`` per admission group the pop walks;
    * ``c_chunk`` per live chunk of Q scanned to find the oldest tuple (HYBRIDJOIN line 7);
    * ``c_round`` per stream-probing round of the cache front-stage, ``c_learn`` per learning
      step (the frequency detection after a disk step);
    * ``in_query_s``, ``in_key_s`` and ``in_leaf_s``: an ``IN (...)`` query of ``keys`` keys
      that lie on ``leaves`` leaves of R's index costs ``in_query_s + in_key_s * keys +
      in_leaf_s * leaves`` (:meth:`in_cost`); ``leaf_rows`` is the rows of R per leaf
      (:meth:`.stores.base.MasterStore.leaf_rows`). Neighbouring keys share a leaf, scattered
      ones read one each, and a leaf read costs several times a key: priced at the neighbours'
      per-key cost alone, the IN-list model predicted a multiple of the measured rate, while a
      fit of the three terms predicted neighbours, scattered keys and IN-list batches alike
      (the fit and its errors: ``docs/measurements.md``).
    """

    query_s: float
    row_s: float
    lookup_s: float
    c_H: float
    c_O: float
    c_E: float
    c_S: float
    c_A: float
    c_compact: float
    c_F: float
    c_cache: float
    c_hit: float
    c_cache_big: float
    c_hit_big: float
    c_step: float
    c_step_mesh: float
    c_step_inlj: float
    c_pop: float
    c_group: float
    c_chunk: float
    c_round: float
    c_learn: float
    in_query_s: float
    in_key_s: float
    in_leaf_s: float
    leaf_rows: float

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            check_positive(f.name, value, "a positive finite number of seconds")

    def io(self, rows) -> float:
        """c_IO(rows) = S + T * rows: one index range load of ``rows`` rows."""
        return self.query_s + self.row_s * rows

    def in_cost(self, keys, leaves):
        """One ``IN (...)`` query of ``keys`` keys on ``leaves`` leaves of R's index."""
        return self.in_query_s + self.in_key_s * keys + self.in_leaf_s * leaves

    def leaves_read(self, keys, rows):
        """Expected leaves an IN query reads for ``keys`` distinct keys drawn evenly from a run
        of ``rows`` consecutive rows of R (a page): each of its rows / leaf_rows leaves is
        missed by every key with probability (1 - 1/leaves)^keys."""
        leaves = np.maximum(np.asarray(rows, dtype=float) / max(self.leaf_rows, 1.0), 1.0)
        return leaves * (1.0 - (1.0 - 1.0 / leaves) ** np.asarray(keys, dtype=float))

    def cache_costs(self, cached: int) -> tuple[float, float]:
        """``(c_cache, c_hit)`` for an H_R of ``cached`` keys: linear in log2(h_R) through the
        measurements at 2^10 and 2^18 keys (one more level of binary search per doubling),
        never below the small cache's."""
        x = max(math.log2(max(cached, 1)) - CACHE_SMALL_LOG2, 0.0) / (CACHE_BIG_LOG2 - CACHE_SMALL_LOG2)
        return (max(self.c_cache + x * (self.c_cache_big - self.c_cache), self.c_cache),
                max(self.c_hit + x * (self.c_hit_big - self.c_hit), self.c_hit))

    def with_io(self, query_s: float, row_s: float) -> "ComponentCosts":
        """The same CPU costs with another store's S and T."""
        return dataclasses.replace(self, query_s=float(query_s), row_s=float(row_s))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def median(cls, runs: "list[ComponentCosts]") -> "ComponentCosts":
        """Each cost the median of its values over ``runs``: one calibration's constants move a
        lot on a shared machine, even between calibrations of one process (``docs/measurements.md``)."""
        return cls(**{f.name: float(np.median([getattr(run, f.name) for run in runs])) for f in dataclasses.fields(cls)})


# -- timing helpers -------------------------------------------------------------------------------
