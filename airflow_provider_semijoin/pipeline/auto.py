"""``algorithm: auto``: the cost models choose a step's algorithm when the task starts.

Each candidate is sized on the dimension table itself (its memory split for the step's budget),
and priced with unit costs measured on this machine against that table
(:func:`..core.calibration.calibrate`: S and T of the database, the engine's own costs); the
papers' service-rate models (:func:`..core.prediction.predict`: MESHJOIN, HYBRIDJOIN eq. 1-4,
SSJ eq. 1-10, CMESHJOIN eq. 4, INLJ) predict each one's rate for a Zipf stream of exponent
``skew``, and the fastest wins.
"""

from __future__ import annotations

import math

from ..core.prediction import predict
from ..core.errors import ConfigError
from ..core.joins.registry import ALGORITHMS, AUTO_CANDIDATES, create
from ..core.stores import MasterStore

def predictions(store: MasterStore, memory: int, skew: float = 1.0, candidates=AUTO_CANDIDATES) -> dict[str, float]:
    """Predicted service rate (tuples/s) of each candidate that fits ``memory`` on ``store``
    (``inf``: every tuple served from memory; candidates whose model is undefined are left out)."""
    from ..core.calibration import calibrate

    costs = calibrate(store)
    n_keys = store.page_map().n_keys
    rates = {}
    for name in candidates:
        if name not in ALGORITHMS:
            continue
        try:
            algorithm = create(name, store, memory)
        except ConfigError:  # the budget is too small for this one
            continue
        rate = predict(name, algorithm, costs, n_keys, skew)
        if rate is not None and not math.isnan(rate):  # NaN: the model is undefined here (0/0)
            rates[name] = rate
    return rates


def choose_algorithm(store: MasterStore, memory: int, skew: float = 1.0) -> tuple[str, dict[str, float]]:
    """The candidate with the highest predicted service rate, and every prediction."""
    rates = predictions(store, memory, skew)
    if not rates:
        raise ConfigError(f"memory: {memory} bytes are too few for any algorithm on {store.table!r}")
    return max(rates, key=rates.get), rates
