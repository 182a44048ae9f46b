"""The warehouse of ``semijoin demo``: its dimensions, the "upstream system" that changes them
while the join runs, and the oracle the output is checked against.

``dim_product`` is a plain dimension (:func:`.workloads.master.generate_master`, seed 0) whose
categories change in place (SCD type 1); ``dim_customer`` is a type-2 dimension
(:func:`.workloads.scd.versioned_table`, seed 3: a tenth of the customers with 2 or 3 versions
from the start, their later versions starting within the stream's event times) whose customers
move (a version closed, a new one inserted: the as-of lookups of ``core/asof.py``). The oracle is
a plain hash join of the regenerated stream with the tables after the run, the customer as of
each sale's ``sold_at``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FACT_TABLE = "fact_sales"
PRODUCT_SEED, CUSTOMER_SEED = 0, 3
CHANGED_KEYS = 40  # per dimension, staged by the "upstream system" while the join runs
VERSIONED_SHARE, MAX_VERSIONS = 0.1, 3  # dim_customer at the start: 10% of customers with 2 or 3 versions
MOVE_CANDIDATES = 400  # the moved customers are drawn from the stream's most frequent ones
MOVE_PAUSE_S = 0.25  # between two moves


def event_span(spec: dict) -> tuple[float, float]:
    """Epoch seconds of the first and the last sale's place in the stream (``source.event_time``)."""
    from .job.sources import source_from_dict

    settings = source_from_dict(spec["source"]).settings()
    first = datetime.fromisoformat(settings["event_time"]["start"]).timestamp()
    return first, first + settings["total_rows"] / settings["rows_per_second"]


def prepare_warehouse(url: str, spec: dict, product_rows: int, customer_rows: int) -> dict:
    """The two dimension tables as generated (the last run's upstream changed them), with no
    change log yet (the join captures their changes from its start: ``change_capture: triggers``),
    no facts; ``dim_customer`` is type 2, its later versions starting within the stream's event
    times. Returns the dimensions as they are before the run: {"dim_product": {nk: (sk,
    category)}, "dim_customer": {nk: [(sk, valid_from, valid_to), ...]}}."""
    from .core.stores.sql import DatabaseURL, side_tables
    from .core.stores.versions import before_table
    from .workloads.master import generate_master
    from .workloads.scd import generate_versioned_master

    generate_master(url, "dim_product", product_rows, seed=PRODUCT_SEED, reuse=False)
    changes_from, changes_to = event_span(spec)
    generate_versioned_master(url, "dim_customer", customer_rows, share=VERSIONED_SHARE, max_versions=MAX_VERSIONS,
                              changes_from=changes_from, changes_to=changes_to, seed=CUSTOMER_SEED)
    connection = DatabaseURL.parse(url).connect()
    try:
        for table in ("dim_product", "dim_customer"):
            for side in (*side_tables(table), before_table(table)):
                connection.execute(f'DROP TABLE IF EXISTS "{side}"')
        connection.execute(f'DROP TABLE IF EXISTS "{FACT_TABLE}"')
        connection.commit()
        return {"dim_product": _products(connection), "dim_customer": _customer_versions(connection)}
    finally:
        connection.close()


def _products(connection) -> dict:
    cursor = connection.execute('SELECT nk, sk, category FROM "dim_product"')
    return {int(nk): (int(sk), category) for nk, sk, category in cursor.fetchall()}


def _customer_versions(connection) -> dict:
    """{nk: [(sk, valid_from, valid_to), ...]} of ``dim_customer``, times as epoch microseconds
    (valid_to None: the current version)."""
    rows = connection.execute('SELECT nk, sk, valid_from, valid_to FROM "dim_customer"').fetchall()
    if not rows:
        return {}
    nk, sk, valid_from, valid_to = zip(*rows)
    micros = [pa.array(times, pa.string()).cast(pa.timestamp("us")).cast(pa.int64()).to_pylist()
              for times in (valid_from, valid_to)]
    versions: dict = {}
    for key, surrogate, start, end in zip(nk, sk, *micros):
        versions.setdefault(int(key), []).append((int(surrogate), start, end))
    return versions


def move_candidates(spec: dict, before: dict, seed: int = 12) -> list[int]:
    """CHANGED_KEYS customers to move, drawn from the MOVE_CANDIDATES known customers the
    regenerated stream names most often (so that many sales happen after a move)."""
    from .job.sources import source_from_dict
    from .workloads.stream import generator_rows

    settings = source_from_dict(spec["source"]).settings()
    customers = generator_rows(settings, 0, settings["total_rows"])["customer_nk"].to_pylist()
    frequent = [nk for nk, _ in Counter(c for c in customers if c in before["dim_customer"]).most_common(MOVE_CANDIDATES)]
    chosen = np.random.default_rng(seed).choice(frequent, min(CHANGED_KEYS, len(frequent)), replace=False)
    return [int(nk) for nk in chosen]


def write_upstream_changes(url: str, seen_rows: Callable[[], int], products: list, moves: dict, started: threading.Event,
                           stop: threading.Event, seed: int = 11) -> None:
    """The upstream system, another application writing the warehouse with plain SQL: once the
    first facts are in, one transaction changes the category of CHANGED_KEYS products (drawn
    from ``products``, the product keys; surrogate keys stay: SCD type 1), then each customer of
    ``moves["customers"]`` moves in a transaction of its own (:func:`move_customer`), until
    ``stop``, at a time after every sale the join has taken (``seen_rows()``: its progress) or
    is taking. Nothing is staged: the running join sees the commits because their triggers
    capture them."""
    from .core.stores.sql import DatabaseURL

    started.wait()
    rng = np.random.default_rng(seed)
    connection = DatabaseURL.parse(url).connect()
    try:
        chosen = rng.choice(products, min(CHANGED_KEYS, len(products)), replace=False)
        connection.execute("BEGIN")
        connection.execute(f'UPDATE "dim_product" SET "category" = "category" || \' (changed)\' '
                           f'WHERE nk IN ({",".join(map(str, chosen))})')
        connection.execute("COMMIT")
        for customer in moves["customers"]:
            if stop.wait(MOVE_PAUSE_S):
                break
            # a time no sale the join has taken or is taking happened at or after: a sale is never
            # later than its place in the stream, a micro-batch holds at most ahead_rows / 3 sales
            move_at = moves["first_s"] + (seen_rows() + moves["ahead_rows"]) / moves["rows_per_second"]
            move_customer(connection, customer, move_at, rng)
    finally:
        connection.close()


def move_customer(connection, nk: int, move_at_s: float, rng: np.random.Generator) -> None:
    """Customer ``nk`` moves at ``move_at_s`` (epoch seconds; at least a second after its current
    version began), in one transaction: the current version's ``valid_to`` becomes the move time
    and a new version - a new surrogate key, another city - is valid from then."""
    from .workloads.scd import CITIES, TIME_FORMAT, iso_utc

    connection.execute("BEGIN IMMEDIATE")
    try:
        cursor = connection.execute('SELECT * FROM "dim_customer" WHERE nk = ? AND valid_to IS NULL', (nk,))
        columns = [d[0] for d in cursor.description]
        current = dict(zip(columns, cursor.fetchone()))
        began = datetime.strptime(current["valid_from"], TIME_FORMAT).replace(tzinfo=timezone.utc).timestamp()
        moved_at = iso_utc(max(move_at_s, began + 1))
        (next_sk,) = connection.execute('SELECT MAX(sk) + 1 FROM "dim_customer"').fetchone()
        connection.execute('UPDATE "dim_customer" SET valid_to = ? WHERE sk = ?', (moved_at, current["sk"]))
        new = {**current, "sk": next_sk, "valid_from": moved_at, "valid_to": None,
               "city": str(rng.choice([c for c in CITIES if c != current["city"]]))}
        connection.execute(f'INSERT INTO "dim_customer" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in columns)}) '
                           f'VALUES ({", ".join("?" for _ in columns)})', [new[c] for c in columns])
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def version_at(versions: list, at: int) -> int | None:
    """The surrogate key of the version of ``versions`` ((sk, valid_from, valid_to) in epoch
    microseconds) valid at ``at``: ``valid_from <= at < valid_to`` (valid_to None: open)."""
    valid = [sk for sk, start, end in versions if start <= at and (end is None or at < end)]
    return valid[0] if len(valid) == 1 else None


def check_against_oracle(url: str, spec: dict, before: dict, dead_folder: Path) -> dict:
    """Every sale of the stream left exactly once, as the hash join of the stream with the
    dimensions says: a fact row with the product's surrogate key (-1 for an unknown product), the
    category before or after the update, and the surrogate key of the customer's version valid
    at the sale's ``sold_at`` in ``dim_customer`` after the run (its moves included: the as-of
    oracle); or a dead letter (unknown customer)."""
    from .core.stores.sql import DatabaseURL
    from .job.sources import source_from_dict
    from .workloads.stream import generator_rows

    settings = source_from_dict(spec["source"]).settings()
    stream = generator_rows(settings, 0, settings["total_rows"])
    connection = DatabaseURL.parse(url).connect()
    try:
        after = {"dim_product": _products(connection), "dim_customer": _customer_versions(connection)}
        created = connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (FACT_TABLE,)).fetchone()
        facts = connection.execute(f'SELECT sj_id, product_sk, category, customer_sk FROM "{FACT_TABLE}"').fetchall() if created else []
    finally:
        connection.close()
    dead = pq.read_table(dead_folder) if dead_folder.exists() else pa.table({"sj_id": pa.array([], pa.string())})
    left = Counter([str(f[0]) for f in facts] + dead["sj_id"].to_pylist())
    tids = [str(t) for t in stream["tid"].to_pylist()]
    lost = sum(1 for t in tids if t not in left)
    duplicated = sum(c - 1 for c in left.values() if c > 1)
    unknown = len(set(left) - set(tids))
    fact_of = {str(f[0]): f[1:] for f in facts}
    wrong = 0
    expected_dead = 0
    moved_sks = {sk for versions in after["dim_customer"].values() for sk, _, _ in versions} \
        - {sk for versions in before["dim_customer"].values() for sk, _, _ in versions}
    after_a_move = 0
    sold_at = stream[settings["event_time"]["column"]].cast(pa.int64()).to_pylist()
    for tid, product, customer, at in zip(tids, stream["nk"].to_pylist(), stream["customer_nk"].to_pylist(), sold_at):
        if customer not in before["dim_customer"]:
            expected_dead += 1
            wrong += tid in fact_of
            continue
        got = fact_of.get(tid)
        if got is None:
            wrong += 1
            continue
        product_sk, category, customer_sk = got
        old, new = before["dim_product"].get(product), after["dim_product"].get(product)
        want_product = -1 if old is None else old[0]
        categories = {None} if old is None else {old[1], new[1]}
        want_customer = version_at(after["dim_customer"][customer], at)
        after_a_move += want_customer in moved_sks
        wrong += (product_sk != want_product) or (category not in categories) or (customer_sk != want_customer)
    unknown_products = sum(1 for p in stream["nk"].to_pylist() if p not in before["dim_product"])
    return {"lost": lost, "duplicated": duplicated, "unknown_ids": unknown, "wrong": wrong, "unknown_products": unknown_products,
            "dead_letters": dead.num_rows, "expected_dead_letters": expected_dead, "moves": len(moved_sks),
            "sales_after_a_move": after_a_move, "customer_versions": sum(map(len, before["dim_customer"].values())),
            "ok": lost == duplicated == unknown == wrong == 0 and dead.num_rows == expected_dead}
