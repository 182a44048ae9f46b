"""The field checks the job spec's classes share: each raises :class:`SpecError` naming the field."""

from __future__ import annotations

import re

from ..core.checks import check_positive
from ..core.errors import ConfigError, SpecError, shown
from ..core.stores.sql import DatabaseURL, check_identifier, redact

SECRET_OPTION = re.compile(r"pass|secret|token|jaas|credential|private|auth|key", re.IGNORECASE)


def one_of(name: str, value, allowed) -> None:
    if value not in allowed:
        raise SpecError(f"{name}: {shown(value)} is not one of {list(allowed)}")


def positive(name: str, value, *, optional: bool = False, integer: bool = False) -> None:
    check_positive(name, value, integer=integer, optional=optional, error=SpecError)


def identifier(name: str, value) -> None:
    try:
        check_identifier(value, name)
    except ConfigError as exc:
        raise SpecError(str(exc)) from None


def database_url(name: str, value) -> None:
    try:
        DatabaseURL.parse(value)
    except ConfigError as exc:
        raise SpecError(f"{name}: {str(exc).split(': ', 1)[1]}") from None


def shown_options(options: dict) -> dict:
    """``options`` with the values of secret-looking names (``kafka.sasl.jaas.config``,
    ``*password*``, ``*secret*``, ``*token*``...) hidden and URLs redacted: for logs, XCom, the UI."""
    return {k: "***" if SECRET_OPTION.search(str(k)) else redact(v) if isinstance(v, str) else v
            for k, v in options.items()}
