"""Semi-stream join algorithms behind one engine contract (see :mod:`.base`)."""

from .base import JoinAlgorithm, JoinOutput, StreamBuffer, StreamChunk
from .registry import ALGORITHMS, algorithm_class, create, describe

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
