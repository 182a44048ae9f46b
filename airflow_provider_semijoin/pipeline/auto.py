"""``algorithm: auto``: the cost models choose a step's algorithm when the task starts.

Each candidate is planned on the dimension table itself (:mod:`..core.joins.plan`: nothing is
built), and priced with unit costs measured on
this machine against that table (:func:`..core.calibration.calibrate`: S and T of the database,
the engine's own costs); the papers' service-rate models (:func:`..core.prediction.predict`:
MESHJOIN, HYBRIDJOIN eq. 1-4, SSJ eq. 1-10, CMESHJOIN eq. 4, INLJ) predict each one's rate for a
Zipf stream of exponent ``skew``, and the fastest wins. A key of K rows (the versions of a
type-2 dimension) makes each page K times the rows read (``rows_per_key``).

A step's memory holds the algorithm's structures *and* the rows of the tuples inside it
(:func:`..core.session.planned_for_rows`, as the Spark step splits it), so each candidate is
predicted at the share the rows leave it: a candidate that holds many tuples (MESHJOIN's and
HYBRIDJOIN's H_S) gets less of M than one that holds few (INLJ). The rows' width is not known
before the first micro-batch; :func:`..job.rowbytes.estimated_row_bytes` estimates it from the
source's schema.
"""

from __future__ import annotations

import math

from ..core.errors import BudgetError, ConfigError
from ..core.joins.registry import ALGORITHMS, AUTO_CANDIDATES, planner
from ..core.prediction import predict
from ..core.session import planned_for_rows
from ..core.stores import MasterStore


def predictions(store: MasterStore, memory: int, skew: float = 1.0, candidates=AUTO_CANDIDATES,
                row_bytes: float | None = None, costs=None) -> dict[str, float]:
    """Predicted service rate (tuples/s) of each candidate that fits ``memory`` on ``store``
    (``inf``: every tuple served from memory; candidates whose model is undefined are left out).
    With ``row_bytes``, each is predicted at the share of ``memory`` that the rows of the tuples
    it holds leave it. ``costs``: the component costs to predict with (default: measured now,
    :func:`..core.calibration.calibrate`)."""
    from ..core.calibration import calibrate

    costs = calibrate(store) if costs is None else costs
    page_map = store.page_map()
    n_keys = page_map.n_keys
    rates = {}
    for name in candidates:
        if name not in ALGORITHMS:
            continue
        try:
            plans = planner(name, store)
            plan = plans.plan(memory) if row_bytes is None else planned_for_rows(plans, memory, row_bytes)[0]
        except ConfigError:  # the budget is too small for this one
            continue
        rate = predict(name, plan, costs, n_keys, skew, settings=plans.settings,  # from the plan: nothing is built
                       rows_per_key=page_map.rows_per_key)
        if rate is not None and not math.isnan(rate):  # NaN: the model is undefined here (0/0)
            rates[name] = rate
    return rates


def choose_algorithm(store: MasterStore, memory: int, skew: float = 1.0,
                     row_bytes: float | None = None) -> tuple[str, dict[str, float]]:
    """The candidate with the highest predicted service rate, and every prediction."""
    rates = predictions(store, memory, skew, row_bytes=row_bytes)
    if not rates:
        raise BudgetError(f"memory: {memory} bytes are too few for any algorithm on {store.table!r}")
    return max(rates, key=rates.get), rates
