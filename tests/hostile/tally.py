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


def tally_markdown(table: dict) -> str:
    """``tally.json``'s table as Markdown: inputs per surface with a total row (its distinct errors
    counted over all surfaces), then each surface's distinct errors (values blanked, see
    ``error_kind``) with how many inputs ended in each."""
    def cell(text: str, code: bool = False) -> str:
        # what does not print (control characters, private-use code points) as Python's escapes
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text.replace("\n", " "))
        text = text.replace("|", "\\|")
        return "`" + text.replace("`", "'") + "`" if code else text

    lines = ["| surface | inputs | accepted | rejected | distinct errors |", "|---|---:|---:|---:|---:|"]
    for surface, t in table.items():
        lines.append(f"| {cell(surface)} | {t['inputs']} | {t['accepted']} | {t['inputs'] - t['accepted']} "
                     f"| {t['distinct_errors']} |")
    total = {k: sum(t[k] for t in table.values()) for k in ("inputs", "accepted")}
    distinct = len({error for t in table.values() for error in t["errors"]})  # one error on two surfaces: once
    lines.append(f"| **total** | {total['inputs']} | {total['accepted']} | {total['inputs'] - total['accepted']} "
                 f"| {distinct} |")
    for surface, t in table.items():
        if t["errors"]:
            lines += ["", f"### {cell(surface)}: {t['distinct_errors']} distinct errors", "",
                      "| inputs | error (values blanked as …) |", "|---:|---|"]
            lines += [f"| {n} | {cell(error, code=True)} |" for error, n in t["errors"].items()]
    return "\n".join(lines) + "\n"
