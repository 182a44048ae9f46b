"""Errors raised by the engine.

Every message is one sentence naming what is wrong and what was expected, so the command line
and the Airflow task can show it as it is, without a traceback.
"""


class SemiJoinError(Exception):
    """Base class of every error the engine raises on purpose."""


class ConfigError(SemiJoinError, ValueError):
    """Bad configuration, detected before any work starts."""


class StoreError(SemiJoinError):
    """The master-data store is missing something the join needs (table, column, index)."""


class SpecError(ConfigError):
    """A job or pipeline spec is invalid; the message starts with the field's path (``steps[1].algorithm: ...``)."""
