"""The one home of input checks: every spec, operator, sensor, trigger and CLI argument checks through these.

Each check takes the field's path as the user wrote it (``steps[0].memory``, ``min_pending``)
and what was expected, and raises ``error`` (:class:`ConfigError` by default, :class:`SpecError`
for specs) with one sentence: ``"<path>: <value> is not <expected>"``. A ``bool`` is never a
number (``True`` is an ``int`` in Python, never in a configuration).
"""

from __future__ import annotations

import math
import numbers
import re

from .errors import ConfigError, shown

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")  # \Z: $ would let a final newline through


def is_number(value, *, integer: bool = False) -> bool:
    """True for a finite int or float (an integer when ``integer``), never for a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
        return False
    return integer or math.isfinite(value)


def check_number(path: str, value, expected: str, *, integer: bool = False, minimum: float | None = None,
                 above: float | None = None, below: float | None = None, maximum: float | None = None,
                 optional: bool = False, error: type[Exception] = ConfigError):
    """``value`` if it is a number (an integer when ``integer``) with ``minimum <= value``,
    ``above < value``, ``value < below``, ``value <= maximum`` (each bound when given); None when
    ``optional`` and None; else ``error("<path>: <value> is not <expected>")``."""
    if value is None and optional:
        return None
    inside = is_number(value, integer=integer) and (
        (minimum is None or value >= minimum) and (above is None or value > above)
        and (below is None or value < below) and (maximum is None or value <= maximum)
    )
    if not inside:
        raise error(f"{path}: {shown(value)} is not {expected}")
    return int(value) if integer else value


def check_positive(path: str, value, expected: str | None = None, *, integer: bool = False, optional: bool = False,
                   error: type[Exception] = ConfigError):
    """``value`` if it is a positive number (integer); ``expected`` defaults to "a positive number" /
    "a positive integer"."""
    expected = expected or f"a positive {'integer' if integer else 'number'}"
    return check_number(path, value, expected, integer=integer, above=0, optional=optional, error=error)


def check_flag(path: str, value, *, error: type[Exception] = ConfigError) -> bool:
    """``value`` if it is ``True`` or ``False`` (not 1, not "yes")."""
    if not isinstance(value, bool):
        raise error(f"{path}: {shown(value)} is not true or false")
    return value


def check_int(value, what: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer in [minimum, maximum], else a ConfigError naming the bound."""
    if not is_number(value, integer=True):
        raise ConfigError(f"{what}: {value!r} is not an integer")
    value = int(value)
    if value < minimum:
        raise ConfigError(f"{what}: {value} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{what}: {value} must be <= {maximum}")
    return value


def check_identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a plain SQL identifier, else raise a ConfigError naming ``what``."""
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        raise ConfigError(
            f"{what}: {shown(name)} is not a valid identifier (expected letters, digits and _, "
            "starting with a letter or _, at most 64 characters)"
        )
    return name
