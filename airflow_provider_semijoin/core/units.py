"""Sizes given by people: ``50MB``, ``512KiB``, ``1G``, ``1048576``."""

from __future__ import annotations

import re

from .errors import ConfigError, shown

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


MAX_BYTES = 2**50  # 1024 TB: more is a typo (or hostile), and would overflow the sizing arithmetic


def parse_bytes(text, what: str = "memory") -> int:
    """Bytes in ``text``; K, M, G, T are powers of 1024 (as MySQL and Spark read them)."""
    if isinstance(text, int) and not isinstance(text, bool) and 0 < text <= MAX_BYTES:
        return text
    match = _SIZE.match(str(text))
    size = float(match.group(1)) * _UNITS[match.group(2).upper()] if match else 0.0
    if not 1 <= size <= MAX_BYTES:
        raise ConfigError(
            f"{what}: {shown(text)} is not a size (expected e.g. 50MB, 512KB, 1GB or a number of bytes, up to 1024TB)"
        )
    return int(size)
