"""Semi-stream join algorithms behind one engine contract (see :mod:`.base`).

The registry's names are loaded on first use (PEP 562), so a module below the algorithms - the
cost models (:mod:`..costmodel`) read :mod:`.stream_table`'s layout - can import one of this
package's modules without importing every algorithm first.
"""

from .base import JoinAlgorithm, JoinOutput, StreamBuffer, StreamChunk

_REGISTRY_NAMES = ("ALGORITHMS", "algorithm_class", "create", "describe")


def __getattr__(name: str):
    if name in _REGISTRY_NAMES:
        from . import registry

        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALGORITHMS",
    "JoinAlgorithm",
    "JoinOutput",
    "StreamBuffer",
    "StreamChunk",
    "algorithm_class",
    "create",
    "describe",
]
