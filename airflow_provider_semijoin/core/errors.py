"""Errors raised by the engine, and :func:`shown` for the values they quote.

Every message is one sentence naming what is wrong and what was expected, so the command line
and the Airflow task can show it as it is, without a traceback.
A value quoted in a message goes through :func:`shown`: a hostile 100 kB value is cut, not echoed.
"""

import re
import reprlib

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 60
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 4
_SHORT.maxlevel = 2


def shown(value) -> str:
    """``repr(value)`` cut to about 60 characters per part, for error messages."""
    return _SHORT.repr(value)


class SemiJoinError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigError(SemiJoinError, ValueError):
    """Bad configuration, detected before any work starts."""


class BudgetError(ConfigError):
    """A memory budget too small for what it must hold (an algorithm's smallest structures, the
    rows of the tuples a step carries, any candidate of ``auto``); the message starts with
    ``memory:`` and says how much would do. A caller that searches for the smallest budget
    catches this, not the message."""


class StoreError(SemiJoinError):
    """The master-data store is missing something the join needs (table, column, index)."""


class SpecError(ConfigError):
    """A job or pipeline spec is invalid; the message starts with the field's path (``steps[1].algorithm: ...``)."""


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


def shown_key(key) -> str:
    """A mapping key as a part of a field path (``rename.<key>``): as it is when it is a plain
    name, else :func:`shown` (quoted, cut, newlines escaped)."""
    return key if isinstance(key, str) and _PLAIN_KEY.match(key) else shown(key)
