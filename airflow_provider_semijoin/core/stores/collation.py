"""String keys in the key column's own collation: a match means what ``s.key = r.key`` means.

MySQL and MariaDB compare strings through the column's collation: in ``utf8mb4_general_ci``
(MariaDB's default) ``'abc' = 'ABC '``, in ``utf8mb4_unicode_ci`` also ``'ß' = 'ss'`` and
``'é' = 'E'``. The engine compares keys byte for byte (numpy ``searchsorted`` and ``==``), so for
such a column every key, R's and the stream's, is replaced by the collation's **sort key**:
the server's ``WEIGHT_STRING(key)``, padded to one width, the longest sort key of R:

* a PAD SPACE collation (a name without ``nopad``) compares strings as if the shorter one were
  padded with spaces: sort keys are padded with the weight of a space, ``WEIGHT_STRING(' ')``,
  so ``'a'`` and ``'a  '`` have one key and ``'a\\t' < 'a'``, as in the index;
* a NO PAD collation (``utf8mb4_general_nopad_ci``, ``utf8mb4_uca1400_nopad_ai_ci``, MySQL 8's
  ``utf8mb4_0900_ai_ci``) pads them with zero bytes: the shorter one sorts first.

The byte order of these keys is the collation's (the index's) order, so the page map, the
range loads ``key >= lo AND key < hi`` (bound with R's own key text for ``lo`` and ``hi``, kept
in :attr:`.base.PageMap.bound_values`) and the stream's keys agree on one order, and several
rows of R whose keys the collation calls equal (``'abc'`` and ``'ABC'`` under a non-unique
index) share one key: a stream key finds all of them, as the database's join does. R's sort
keys come with its rows (``SELECT WEIGHT_STRING(key), ...``); the stream's are computed by the
server in bulk, one ``JSON_TABLE`` query (MySQL 8, MariaDB 10.6+) per :data:`WEIGH_BATCH` distinct
keys, except in ``utf8mb4_general_ci`` and ``utf8mb4_general_nopad_ci``, which weigh each
character on its own: their stream keys are weighed here, in numpy, from the server's weights
of the 63,487 BMP characters (fetched once; tested equal to the server's ``WEIGHT_STRING`` on
random strings). INLJ's and the IN-list's lookups bind a stream key's text, kept for up to
:data:`TEXTS_KEPT` distinct keys; a key whose text is no longer kept is looked up through its
page (one range load filtered by sort key), which gives the same rows.

SQLite's built-in collations are simpler (:class:`FoldedCollation`): ``NOCASE`` folds ASCII
letters, ``RTRIM`` ignores trailing spaces; a key is replaced by the text the collation compares,
which binds as it is.

Limits: the collation must weigh one level (every ``_ci``, ``_ai_ci`` and ``_bin`` collation of
``utf8mb4``); a multi-level one (MariaDB's ``uca1400_..._as_cs``, MySQL's ``utf8mb4_0900_as_cs``)
is refused with a message, as is a character set other than ``utf8mb4``. In a NO PAD
collation a key of R ending in U+0000 shares its sort key with the key without it (the
stream's keys never hold U+0000: they are ``bad_key``). Tested on MariaDB 10.11 only: MySQL
8's ``utf8mb4_0900_ai_ci`` takes the same path (single level, NO PAD) and its semantics are
tested through ``utf8mb4_uca1400_nopad_ai_ci``, but not on a MySQL server. Binary NO PAD
collations (``utf8mb4_nopad_bin``, ``utf8mb4_0900_bin``) and ``VARBINARY`` keys skip all this:
their keys are the UTF-8 bytes themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import StoreError
from ..keys import KeyType, utf8_keys
from ..reasons import Unmatched
from .sql import check_identifier

WEIGH_BATCH = 20_000  # distinct stream keys per WEIGHT_STRING query (about 0.5 MB of JSON)
TEXTS_KEPT = 1_000_000  # distinct stream keys whose text is kept for lookups


@dataclass(eq=False)
class Collation:
    """A single-level collation's sort keys (see the module).

    ``weigh`` runs ``WEIGHT_STRING`` on the server for a list of strings; ``pad_unit`` is the
    weight a key is padded with (a space's for PAD SPACE, zeros for NO PAD); ``width`` the
    bytes of R's longest sort key. ``per_char``, for a collation that weighs each character on
    its own in one 2-byte unit (``utf8mb4_general_ci``), is the server's weight of every BMP
    character: stream keys are then weighed locally (see :func:`per_char_weights`).
    """

    name: str
    pad_unit: bytes
    pad_space: bool
    weigh: Callable[[list[str]], list[bytes]]
    width: int = 0
    per_char: np.ndarray | None = None
    _kept: list = field(default_factory=list)  # [keys, their texts, sort order] of recent batches

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(f"S{self.width}")

    def keys(self, weights) -> np.ndarray:
        """Sort keys of R as the server returns them -> a key array."""
        return self.padded(list(weights))[0]

    def stream_keys(self, texts: pa.Array, reason: np.ndarray) -> np.ndarray:
        """Stream strings -> sort keys; one whose sort key is longer than R's longest cannot be
        in R (``not_in_master``). Only rows whose ``reason`` is 0 are weighed."""
        at = np.flatnonzero(reason == 0)
        keys = np.zeros(len(texts) if len(at) < len(texts) else 0, self.dtype)
        if not len(at):
            return keys
        encoded = pc.dictionary_encode(texts if len(at) == len(texts) else texts.take(pa.array(at, pa.int64())))
        distinct = encoded.dictionary
        if self.per_char is not None:
            weighed, too_long = self._weighed_here(distinct)
        else:
            weighed, too_long = self.padded(self._weigh(distinct.to_pylist()))
        self._keep(weighed[~too_long], distinct.filter(pa.array(~too_long)))
        index = encoded.indices.to_numpy(zero_copy_only=False)
        reason[at[too_long[index]]] = Unmatched.NOT_IN_MASTER
        if len(at) == len(texts):
            return weighed[index]
        keys[at] = weighed[index]
        return keys

    def sort_keys(self, texts: list[str]) -> list[bytes]:
        """The collation's sort key of each text, of any length (equal ones: equal texts)."""
        unit = len(self.pad_unit)
        keys = []
        for weight in self._weigh(list(texts)):
            while self.pad_space and weight.endswith(self.pad_unit):
                weight = weight[:-unit]
            keys.append(weight)
        return keys

    def texts_of(self, keys: np.ndarray) -> np.ndarray:
        """The texts of stream keys weighed lately (an object array; None where no longer kept)."""
        keys = np.asarray(keys, self.dtype)
        texts = np.full(len(keys), None, dtype=object)
        for batch in reversed(self._kept):
            if batch[2] is None:  # sorted on the first lookup: most algorithms never look up
                batch[2] = np.argsort(batch[0], kind="stable")
            kept, kept_texts, order = batch
            wanted = np.flatnonzero(texts == None)  # noqa: E711 (elementwise)
            if not (len(wanted) and len(kept)):
                continue
            at = np.minimum(np.searchsorted(kept, keys[wanted], sorter=order), len(kept) - 1)
            found = kept[order[at]] == keys[wanted]
            texts[wanted[found]] = kept_texts.take(pa.array(order[at[found]])).to_pylist()
        return texts

    def _weigh(self, values: list[str]) -> list[bytes]:
        return [w for i in range(0, len(values), WEIGH_BATCH) for w in self.weigh(values[i : i + WEIGH_BATCH])]

    def _weighed_here(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`padded` of the server's weights, computed here from ``per_char``."""
        chars = texts.to_numpy(zero_copy_only=False).astype(str)  # UTF-32, padded with code 0
        points = chars.view(np.uint32).reshape(len(chars), chars.dtype.itemsize // 4)
        weights = np.where(points > 0xFFFF, 0xFFFD, self.per_char[points & 0xFFFF]).astype(">u2")
        units = weights.view(np.uint8).reshape(*points.shape, 2)
        return self._fit(units, pc.utf8_length(texts).to_numpy(zero_copy_only=False))

    def _keep(self, keys: np.ndarray, texts: pa.Array) -> None:
        """Keep the texts of the newest :data:`TEXTS_KEPT` distinct keys (older batches go)."""
        if len(keys) > TEXTS_KEPT:
            self._kept = []
            return
        self._kept.append([keys, texts, None])
        while sum(len(k) for k, _, _ in self._kept) > TEXTS_KEPT:
            self._kept.pop(0)

    def padded(self, weights: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        """``(keys, too_long)``: each weight without its trailing pad units, padded with them
        to :attr:`width`; ``too_long`` where that is more than :attr:`width` bytes."""
        unit = len(self.pad_unit)
        lengths = np.fromiter(map(len, weights), dtype=np.int64, count=len(weights))
        longest = max(int(lengths.max()) if len(weights) else 0, unit)
        units = np.array(weights, dtype=f"S{longest}").view(np.uint8).reshape(len(weights), longest // unit, unit)
        return self._fit(units, lengths // unit)

    def _fit(self, units: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Weights as ``(n, units, unit bytes)`` with ``lengths`` units used -> :meth:`padded`."""
        n, m, unit = units.shape
        wide = max(m, self.width // unit)
        if wide > m:
            units = np.concatenate([units, np.zeros((n, wide - m, unit), np.uint8)], axis=1)
        pad = np.frombuffer(self.pad_unit, np.uint8)
        units[np.arange(wide) >= np.asarray(lengths)[:, None]] = pad
        if unit == 2:  # the usual unit: compared as one uint16
            significant = units.reshape(n, wide * 2).view(np.uint16) != pad.view(np.uint16)[0]
        else:
            significant = ~(units == pad).all(axis=2)
        used = np.where(significant.any(axis=1), wide - np.argmax(significant[:, ::-1], axis=1), 0)
        keys = np.ascontiguousarray(units.reshape(n, wide * unit)[:, : self.width]).view(self.dtype).ravel()
        return keys, used * unit > self.width


PER_CHAR = ("utf8mb4_general_ci", "utf8mb4_general_nopad_ci")  # one 2-byte weight per character
_per_char_tables: dict = {}  # (server version, collation) -> its per_char table


def per_char_weights(query: Callable, server: str, name: str) -> np.ndarray | None:
    """For :data:`PER_CHAR` collations, the server's weight of every BMP character (one query,
    once per server version in a process); characters above U+FFFF weigh U+FFFD. None when
    the server does not weigh so (a character weighs other than 2 bytes): then it weighs
    stream keys itself."""
    if name not in PER_CHAR:
        return None
    if (server, name) not in _per_char_tables:
        byte = f"JSON_TABLE('{json.dumps(list(range(256)))}', '$[*]' COLUMNS (i INT PATH '$'))"
        rows = query(
            f"SELECT h.i * 256 + l.i, WEIGHT_STRING(CONVERT(CHAR(h.i * 256 + l.i USING utf32) USING utf8mb4) "
            f"COLLATE {name}), WEIGHT_STRING(_utf8mb4 X'F09F9880' COLLATE {name}) FROM {byte} h, {byte} l "
            "WHERE h.i * 256 + l.i NOT BETWEEN 55296 AND 57343 AND h.i + l.i > 0 ORDER BY 1",
            (),
        )
        weights = [bytes(r[1]) for r in rows]
        table = None
        if all(len(w) == 2 for w in weights) and bytes(rows[0][2]) == b"\xff\xfd":  # U+1F600 weighs U+FFFD
            table = np.zeros(0x10000, np.uint16)
            table[[r[0] for r in rows]] = np.frombuffer(b"".join(weights), ">u2")
        _per_char_tables[(server, name)] = table
    return _per_char_tables[(server, name)]


def probe(query: Callable[[str], list[tuple]], table: str, column: str, collation: str, charset: str) -> Collation:
    """The :class:`Collation` of R's key ``column`` (``collation``/``charset`` from the catalogue);
    ``query(sql, params)`` runs SQL on R's server. Refuses what it cannot compare exactly."""
    name = check_identifier(collation, "key collation")
    if charset != "utf8mb4":
        raise StoreError(
            f"key: column {column!r} of {table!r} has character set {charset}; expected utf8mb4 "
            "(or a binary NO PAD collation such as utf8mb4_nopad_bin, or VARBINARY)"
        )
    space, a, a_space, pads, server = query(
        f"SELECT WEIGHT_STRING(_utf8mb4' ' COLLATE {name}), WEIGHT_STRING(_utf8mb4'a' COLLATE {name}), "
        f"WEIGHT_STRING(_utf8mb4'a ' COLLATE {name}), _utf8mb4'a' = _utf8mb4'a ' COLLATE {name}, VERSION()",
        (),
    )[0]
    space, a, a_space = bytes(space), bytes(a), bytes(a_space)
    if len(a) != len(space) or a_space != a + space:
        raise StoreError(
            f"key: column {column!r} of {table!r} has collation {collation}, which weighs several levels "
            "(accents or case apart); expected a single-level collation (a _ci or _ai_ci one, or a binary one)"
        )
    sql = (
        f"SELECT WEIGHT_STRING(k COLLATE {name}) FROM JSON_TABLE(%s, '$[*]' COLUMNS "
        "(i FOR ORDINALITY, k LONGTEXT CHARACTER SET utf8mb4 PATH '$')) j ORDER BY i"
    )

    def weigh(values: list[str]) -> list[bytes]:
        return [bytes(r[0]) for r in query(sql, (json.dumps(values, ensure_ascii=False),))]

    pad_space = bool(int(pads))
    pad_unit = space if pad_space else bytes(len(space))
    return Collation(collation, pad_unit, pad_space, weigh, per_char=per_char_weights(query, server, collation))


SQLITE_COLLATIONS = ("BINARY", "NOCASE", "RTRIM")


@dataclass(eq=False)
class FoldedCollation:
    """SQLite's ``NOCASE`` (ASCII letters compared in lower case) or ``RTRIM`` (trailing spaces
    ignored): each key is replaced by the text the collation compares, lowered or right-trimmed.
    Its byte order is the collation's order and it has the same key in the collation, so it
    binds as it is."""

    name: str
    width: int

    def fold(self, texts: pa.Array) -> pa.Array:
        return pc.ascii_lower(texts) if self.name == "NOCASE" else pc.utf8_rtrim(texts, characters=" ")

    def sort_keys(self, texts: list[str]) -> list[str]:
        return self.fold(pa.array(texts, pa.string())).to_pylist()

    def keys(self, values) -> np.ndarray:
        """Keys of R as the driver returns them (text) -> a key array."""
        folded = self.fold(pa.array(list(values), pa.string())).cast(pa.binary())
        return folded.to_numpy(zero_copy_only=False).astype(f"S{self.width}")

    def stream_keys(self, texts: pa.Array, reason: np.ndarray) -> np.ndarray:
        return utf8_keys(self.fold(texts).cast(pa.binary()), reason, KeyType("str", self.width))
