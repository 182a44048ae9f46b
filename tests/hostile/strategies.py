"""Hypothesis strategies of hostile values, shared by the hostile-input tests."""

from __future__ import annotations

from hypothesis import strategies as st

INJECTION = [
    "x; DROP TABLE t; --", "a`b", 'a"b', "a'b", "nk--", "1nk", "nk OR 1=1", "`nk`", "nk`; DROP TABLE t; --",
    "' OR '1'='1", "Robert'); DROP TABLE students;--", "%s", "%(x)s", "?", "{0}", "${jndi:ldap://x/a}",
]
ODD_TEXT = ["", " ", "\t", "nk\n", "\x00", "\ud800", "ü", "é" * 40, "a" * 64, "a" * 65, "a" * 100_000, "../../etc/passwd",
            "NULL", "null", "NaN", "inf", "-0", "1e400", "9" * 400, "0x10", "50MB", "-5MB", "1.5", "true"]
HOSTILE_TEXT = st.sampled_from(INJECTION + ODD_TEXT) | st.text(max_size=40)
HOSTILE_NUMBER = st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**70, 10**400]) | st.integers() | \
    st.floats(allow_nan=True, allow_infinity=True)
PLAUSIBLE = st.sampled_from(["nk", "sk", "name", "x_1", 1, 2, 2.5, 100, True, False, "hybridjoin", "ssij", "50MB", "8M",
                             "dead_letter", "retry", "parquet", "files", "generator", "sqlite:///x.db"])
HOSTILE_SCALAR = st.none() | st.booleans() | HOSTILE_NUMBER | HOSTILE_TEXT | PLAUSIBLE
HOSTILE = st.recursive(
    HOSTILE_SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=6,
)


def paths(data, prefix=()):
    """Every (path, value) of nested dicts and lists (the paths a mutation can aim at)."""
    yield prefix, data
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from paths(value, prefix + (i,))


def mutate(data, path, op, value):
    """A deep copy of ``data`` with the element at ``path`` replaced, deleted, or given an extra key."""
    import copy

    data = copy.deepcopy(data)
    if not path:
        return value if op == "replace" else data
    parent = data
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op == "replace":
        parent[last] = value
    elif op == "delete" and isinstance(parent, dict):
        del parent[last]
    elif op == "extra" and isinstance(parent[last], dict):
        parent[last]["sj_unknown_field"] = value
    else:
        parent[last] = value
    return data


@st.composite
def mutations(draw, base: dict, max_mutations: int = 3):
    """``base`` with 1..max_mutations hostile changes; returns (data, the paths changed)."""
    data, changed = base, []
    for _ in range(draw(st.integers(1, max_mutations))):
        candidates = [p for p, _ in paths(data) if p]
        path = draw(st.sampled_from(candidates)) if candidates else ()
        op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "extra"]))
        data = mutate(data, path, op, draw(HOSTILE))
        changed.append(path)
    return data, changed
