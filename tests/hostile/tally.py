"""Counting fuzzed inputs and the distinct errors they end in (see conftest.py)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict

TALLY: dict = defaultdict(lambda: {"inputs": 0, "accepted": 0, "errors": Counter()})

_VALUE = re.compile(r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d[\d.e+-]*|\[[^\]]*\]|\{[^}]*\})")


def error_kind(message: str) -> str:
    """The message with the values in it blanked: ``steps[0].memory: '…' is not a size ...``."""
    return _VALUE.sub("…", message)[:160]


def record(surface: str, error: str | None = None) -> None:
    entry = TALLY[surface]
    entry["inputs"] += 1
    if error is None:
        entry["accepted"] += 1
    else:
        entry["errors"][error_kind(error)] += 1
