"""Airflow triggers (run in the triggerer; they must live in the installed package)."""


def serialized(trigger, names: tuple[str, ...]) -> tuple[str, dict]:
    """What ``trigger.serialize()`` returns: its class path and the arguments ``names`` it is
    re-created from, as they are on it."""
    return f"{type(trigger).__module__}.{type(trigger).__qualname__}", {name: getattr(trigger, name) for name in names}
