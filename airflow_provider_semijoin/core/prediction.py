"""What an algorithm of the registry is predicted to sustain: its family's cost model
(:mod:`.costmodel`) for the memory split it chose.

Above the registry (it resolves a name to the algorithm's ``cost_model`` family), where
:mod:`.costmodel` sits below the algorithms; ``auto`` (:mod:`..pipeline.auto`) and the benchmarks
ask here.
"""

from __future__ import annotations

from .costmodel import MODELS as PAGE_MODELS
from .costmodel import RANDOM_SHAPE_SEED, Prediction, check_inputs, model, split_of
from .errors import ConfigError
from .joins.plan import Plan
from .joins.registry import ALGORITHMS
from .ssijmodel import ssij_model
from .unitcosts import ComponentCosts

MODELS = (*PAGE_MODELS, "ssij")  # the families an algorithm's ``cost_model`` names

MODELLED: tuple[str, ...] = tuple(name for name, cls in ALGORITHMS.items() if cls.cost_model is not None)


def explain(algorithm: str, split_or_algorithm, costs: ComponentCosts, n_keys: int, exponent: float = 1.0,
            shape: str = "noperm", *, shape_seed: int = RANDOM_SHAPE_SEED, p_n: float | None = None,
            settings: dict | None = None, rows_per_key: float = 1.0) -> Prediction | None:
    """The model of ``algorithm`` for the memory split it chose (``algorithm.memory_split()``,
    the algorithm itself, or the :class:`.joins.plan.Plan` it is built from - nothing built: its
    :meth:`~.joins.base.JoinAlgorithm.planned_split`, with ``settings``), on R of ``n_keys`` distinct keys and a Zipf(``exponent``) stream
    of ``shape``; None for an algorithm without a model (``inlist-lru``: the LRU dict of the
    baseline a user writes). SSIJ's paper gives only a worst case (sec. V); its model is
    :func:`.ssijmodel.ssij_model`.

    ``p_n`` replaces the model's hit ratio p_N of H_R (eq. 1) by another one, e.g. the measured
    hit ratio, to tell the error of p_N from the rest. ``settings`` are the algorithm's
    parameters (taken from the algorithm when one is given). HYBRIDJOIN-L and -PQ (and
    CACHEJOIN-L, -PQ) use HYBRIDJOIN's model: their papers give none, and they read the same
    pages, in another order.

    ``rows_per_key`` (K, :attr:`.stores.pagemaps.PageMap.rows_per_key`: the versions per key of
    a type-2 dimension) makes a page of ``page_rows`` keys K times the rows: the models' range
    load c_IO(rows) = S + T * rows of the models reads ``page_rows * K``.
    """
    n_keys, exponent = check_inputs(n_keys, exponent, shape, p_n)
    if rows_per_key != 1.0:
        costs = costs.with_io(costs.query_s, costs.row_s * max(float(rows_per_key), 1.0))
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm: {algorithm!r} has no cost model (models: {sorted(MODELLED)})")
    if isinstance(split_or_algorithm, Plan):
        split_or_algorithm = ALGORITHMS[algorithm].planned_split(split_or_algorithm)
    split, own = split_of(split_or_algorithm)
    family = ALGORITHMS[algorithm].cost_model
    if family is None:
        return None
    settings = {**own, **(settings or {})}
    if family == "ssij":
        return ssij_model(split, settings, costs, n_keys, exponent, shape, shape_seed, p_n)
    return model(family, algorithm, split, settings, costs, n_keys, exponent, shape, shape_seed, p_n)


def predict(algorithm: str, split_or_algorithm, costs: ComponentCosts, n_keys: int, exponent: float = 1.0,
            shape: str = "noperm", **options) -> float | None:
    """Predicted service rate (stream tuples per second) of ``algorithm`` in the configuration
    ``split_or_algorithm`` (its memory split, the algorithm, or its plan): :func:`explain`'s mu."""
    found = explain(algorithm, split_or_algorithm, costs, n_keys, exponent, shape, **options)
    return None if found is None else found.service_rate_tps
