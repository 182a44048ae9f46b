"""The registry: algorithm names -> classes, with their paper and parameters.

``create("hybridjoin", store, memory, {"page_rows": "1000"})`` validates the name and every
parameter before any work starts. This is the one list of algorithms: the operators (one per
algorithm, :mod:`...operators.join`), ``auto``'s candidates, the cost model's families and the CLI
derive from it; adding an algorithm is its module plus one line here.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import JoinAlgorithm
from .frontstage import CacheJoin, CacheJoinL, CacheJoinPQ, CMeshJoin, FrontStage, SemiStreamJoin
from .hybridjoin import HybridJoin, HybridJoinL, HybridJoinPQ
from .indexjoin import IndexNestedLoopJoin, InListJoin, InListLRUJoin
from .meshjoin import MeshJoin
from .plan import Planner
from .ssij import SemiStreamedIndexJoin

ALGORITHMS: dict[str, type[JoinAlgorithm]] = {
    cls.name: cls
    for cls in (
        IndexNestedLoopJoin, InListJoin, InListLRUJoin, MeshJoin, HybridJoin, HybridJoinL, HybridJoinPQ,
        SemiStreamJoin, CMeshJoin, CacheJoin, CacheJoinL, CacheJoinPQ, SemiStreamedIndexJoin,
    )
}
# the tuple-level cache family (a front-stage over a disk phase): the names the cache benchmarks sweep
CACHE_ALGORITHMS: tuple[str, ...] = tuple(name for name, cls in ALGORITHMS.items() if issubclass(cls, FrontStage))
# what ``algorithm: auto`` chooses from (:mod:`...pipeline.auto`)
AUTO_CANDIDATES: tuple[str, ...] = tuple(name for name, cls in ALGORITHMS.items() if cls.auto_candidate)


def algorithm_class(name: str) -> type[JoinAlgorithm]:
    if name not in ALGORITHMS:
        raise ConfigError(f"algorithm: {name!r} is not one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]


def create(name: str, store, memory: int, params: dict | None = None, **kwargs) -> JoinAlgorithm:
    """A new algorithm ``name`` over ``store`` with a budget of ``memory`` bytes."""
    return algorithm_class(name)(store, memory, **(params or {}), **kwargs)


def planner(name: str, store, params: dict | None = None, **kwargs) -> Planner:
    """Plans of algorithm ``name`` over ``store`` at any budget, R's statistics read once (:mod:`.plan`)."""
    return Planner(algorithm_class(name), store, params, **kwargs)


def describe() -> list[dict]:
    """Every algorithm with its paper and parameters (for ``semijoin algorithms``)."""
    return [
        {
            "name": name,
            "paper": cls.paper,
            "params": {p: {"type": s.type.__name__, "default": s.default, "doc": s.doc,
                           **({"choices": list(s.choices)} if s.choices else {})} for p, s in cls.params.items()},
        }
        for name, cls in ALGORITHMS.items()
    ]
