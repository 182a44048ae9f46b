"""The ``inferred_member`` options of a step (``on_missing: inferred_member``), checked and normalised.

``inferred_member: {flag_column: inferred, defaults: {name: 'unknown'}, sequence: s, surrogate_key: sk}``
says how a placeholder row is written for a natural key R lacks (:mod:`..core.stores.inferred`):
the column set to 1 on it (``flag_column``, default ``inferred``), the values of other columns
(``defaults``; the rest take the table's defaults), and, on MariaDB, a ``sequence`` the
``surrogate_key`` column is filled from (both or neither; neither: the table's auto-increment).
Pure data checks, at parse time; what needs the database is checked when the step starts.
"""

from __future__ import annotations

from ..core.errors import SpecError, shown, shown_key
from .checks import identifier

INFERRED_OPTIONS = ("flag_column", "defaults", "sequence", "surrogate_key")
DEFAULT_FLAG_COLUMN = "inferred"
_SCALARS = (str, int, float, bool, type(None))


def inferred_member_options(value, on_missing: str, key: str) -> dict | None:
    """``inferred_member`` as the spec keeps it: all four options (None with any other
    ``on_missing``, where giving it is an error); ``key``: R's key, which they may not name."""
    if on_missing != "inferred_member":
        if value is not None:
            raise SpecError(f"inferred_member: given, but on_missing is {shown(on_missing)} (it needs 'inferred_member')")
        return None
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise SpecError(f"inferred_member: {shown(value)} is not a mapping of {list(INFERRED_OPTIONS)}")
    unknown = sorted(set(value) - set(INFERRED_OPTIONS), key=repr)
    if unknown:
        raise SpecError(f"inferred_member.{shown_key(unknown[0])}: not an option of inferred_member "
                        f"(options: {list(INFERRED_OPTIONS)})")
    options = {"flag_column": DEFAULT_FLAG_COLUMN, "defaults": {}, "sequence": None, "surrogate_key": None, **value}
    identifier("inferred_member.flag_column", options["flag_column"])
    defaults = options["defaults"]
    if not isinstance(defaults, dict):
        raise SpecError(f"inferred_member.defaults: {shown(defaults)} is not a mapping of column names to values")
    named = {"flag_column": options["flag_column"], "master.key": key}
    for column, default in defaults.items():
        identifier(f"inferred_member.defaults.{shown_key(column)}", column)
        if not isinstance(default, _SCALARS):
            raise SpecError(f"inferred_member.defaults.{column}: {shown(default)} is not a single value "
                            "(a string, number, true/false or null)")
        clash = next((name for name, other in named.items() if other == column), None)
        if clash is not None:
            raise SpecError(f"inferred_member.defaults.{column}: is the {clash}, which the placeholder sets itself")
    if options["flag_column"] == key:
        raise SpecError(f"inferred_member.flag_column: {shown(key)} is master.key; expected a column of its own")
    if (options["sequence"] is None) != (options["surrogate_key"] is None):
        raise SpecError("inferred_member.sequence, surrogate_key: give both (a MariaDB sequence and the column it "
                        "fills) or neither (the table's auto-increment)")
    for name in ("sequence", "surrogate_key"):
        if options[name] is not None:
            identifier(f"inferred_member.{name}", options[name])
    if options["surrogate_key"] in (key, options["flag_column"], *defaults):
        raise SpecError(f"inferred_member.surrogate_key: {shown(options['surrogate_key'])} is also the key, the flag "
                        "or a default; expected the surrogate key column")
    return {**options, "defaults": dict(defaults)}
