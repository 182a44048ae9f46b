"""``semijoin join --as-of EVENT_TIME,VALID_FROM,VALID_TO`` (issue 55) end to end, on SQLite
(DATETIME kept as ISO text) and MariaDB (DATETIME): every algorithm of the registry gives each
tuple the version valid at its event time - the database's own ``LEFT JOIN ... ON s.nk = r.nk
AND s.sold_at >= r.valid_from AND (s.sold_at < r.valid_to OR r.valid_to IS NULL)`` as a
multiset - with out-of-order event times, several versions per key, gaps between versions, null
event times and keys R lacks; bad ``--as-of`` input is one line and exit status 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.asof import AsOf
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import ALGORITHMS, create
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import open_store
from type2_tables import BEFORE_1970, UNKNOWN, databases_join, near_bounds, stream_file, versions, write_dimension

SMALL = {"page_rows": 4, "partition_pages": 2}  # small pages: R's 40 keys are many pages
AS_OF = "sold_at,valid_from,valid_to"


@pytest.fixture
def type2(backend, tmp_path):
    """(R's table, its rows, a stream file of 600 tuples: 10 with a null event time)."""
    rng = np.random.default_rng(55)
    rows = versions(rng)
    table = write_dimension(backend, rows)
    stream = stream_file(rng, 0, 600, (0, 190), nulls=10)
    pq.write_table(stream, tmp_path / "s.parquet")
    return table, rows, stream


def join_args(backend, table: str, tmp_path, algorithm: str, *extra: str) -> list[str]:
    params = [f"--set={p}={v}" for p, v in SMALL.items() if p in ALGORITHMS[algorithm].params]
    return ["join", "--algorithm", algorithm, "--master", backend.url, "--table", table, "--key", "nk",
            "--select", "sk", "--stream", str(tmp_path / "s.parquet"), "--stream-key", "nk",
            "--out", str(tmp_path / "out.parquet"), "--unmatched", str(tmp_path / "unmatched.parquet"),
            "--memory", "1MB", "--stats", str(tmp_path / "stats.json"), *params, *extra]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_join_as_of_equals_the_databases_join(backend, type2, tmp_path, algorithm, capsys):
    table, rows, stream = type2
    assert main(join_args(backend, table, tmp_path, algorithm, "--as-of", AS_OF)) == 0
    matched, unmatched = pq.read_table(tmp_path / "out.parquet"), pq.read_table(tmp_path / "unmatched.parquet")
    got = Counter(zip(matched["tid"].to_pylist(), matched["sk"].to_pylist()))
    got.update((tid, UNKNOWN) for tid in unmatched["tid"].to_pylist())
    assert got == databases_join(backend, table, stream)
    assert max(Counter(matched["tid"].to_pylist()).values()) == 1  # one version a tuple
    assert matched.column_names == ["tid", "nk", "sold_at", "sk"]  # the version columns read, not written
    in_r = {r[1] for r in rows}
    expected_reasons = {tid: "not_in_master" if nk not in in_r else "null_event_time" if t is None else "no_version_valid"
                        for tid, nk, t in zip(*(unmatched[c].to_pylist() for c in ("tid", "nk", "sold_at")))}
    assert dict(zip(unmatched["tid"].to_pylist(), unmatched["reason"].to_pylist())) == expected_reasons
    reasons = set(expected_reasons.values())
    assert reasons == {"not_in_master", "null_event_time", "no_version_valid"}  # each way out is exercised
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["exactly_once"]["ok"] and stats["tuples_in"] == 600 == matched.num_rows + unmatched.num_rows
    assert stats["unmatched_by_reason"] == dict(Counter(expected_reasons.values()))
    assert "exactly once: yes" in capsys.readouterr().out


def test_join_as_of_takes_nanosecond_event_times(sqlite_backend, tmp_path):
    """Issue 66: a stream file whose event time is timestamp[ns] with nanosecond digits (pandas'
    default) joins - 1-999 ns either side of each version bound, each tuple gets the version the
    database comparing every digit gives - where it died with ArrowInvalid ("would lose data")."""
    rows = versions(np.random.default_rng(66)) + [BEFORE_1970]  # (a floor is not a truncation towards zero)
    table = write_dimension(sqlite_backend, rows)
    stream = near_bounds(rows)
    pq.write_table(stream, tmp_path / "s.parquet")
    assert main(join_args(sqlite_backend, table, tmp_path, "hybridjoin", "--as-of", AS_OF)) == 0
    matched, unmatched = pq.read_table(tmp_path / "out.parquet"), pq.read_table(tmp_path / "unmatched.parquet")
    got = Counter(zip(matched["tid"].to_pylist(), matched["sk"].to_pylist()))
    got.update((tid, UNKNOWN) for tid in unmatched["tid"].to_pylist())
    expected = databases_join(sqlite_backend, table, stream)
    assert got == expected
    assert len({sk for _, sk in expected}) > len(rows) / 2  # (most versions are some tuple's)


def test_join_without_as_of_returns_every_version(sqlite_backend, tmp_path):
    """The control: the same join by equality gives every version of a key, so --as-of chose."""
    rng = np.random.default_rng(55)
    rows = versions(rng)
    table = write_dimension(sqlite_backend, rows)
    pq.write_table(stream_file(rng, 0, 600, (0, 190), nulls=10), tmp_path / "s.parquet")
    assert main(join_args(sqlite_backend, table, tmp_path, "hybridjoin")) == 0
    matched = pq.read_table(tmp_path / "out.parquet")
    per_key = Counter(r[1] for r in rows)
    assert Counter(matched["tid"].to_pylist()) == Counter(
        {tid: per_key[nk] for tid, nk in zip(matched["tid"].to_pylist(), matched["nk"].to_pylist())})
    assert max(per_key.values()) > 1


def test_the_semijoin_command_takes_as_of_with_every_column(sqlite_backend, tmp_path):
    """A fresh process, as other tools drive it; without --select the version columns are output."""
    rng = np.random.default_rng(7)
    table = write_dimension(sqlite_backend, versions(rng))
    stream = stream_file(rng, 0, 200, (0, 190))
    pq.write_table(stream, tmp_path / "s.parquet")
    args = [a for a in join_args(sqlite_backend, table, tmp_path, "cachejoin", "--as-of", AS_OF) if a != "--select"]
    args.remove("sk")
    done = subprocess.run([sys.executable, "-m", "airflow_provider_semijoin.cli", *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    matched = pq.read_table(tmp_path / "out.parquet")
    assert matched.column_names == ["tid", "nk", "sold_at", "id", "sk", "valid_from", "valid_to"]
    got = Counter(zip(matched["tid"].to_pylist(), matched["sk"].to_pylist()))
    unmatched = pq.read_table(tmp_path / "unmatched.parquet")["tid"].to_pylist()
    assert got + Counter((tid, UNKNOWN) for tid in unmatched) == databases_join(sqlite_backend, table, stream)


@pytest.mark.parametrize("as_of, message", [
    ("sold_at,valid_from", r"--as-of: 'sold_at,valid_from' is not EVENT_TIME,VALID_FROM,VALID_TO \(the stream's "
                           r"event-time column and R's two version columns, comma separated\)$"),
    ("sold_at,,valid_to", r"--as-of: 'sold_at,,valid_to' is not EVENT_TIME,VALID_FROM,VALID_TO"),
    ("nk,valid_from,valid_to", r"--as-of: as_of.event_time: 'nk' is the join column; expected the stream's "
                               r"event-time column$"),
    ("sold_at,nk,valid_to", r"--as-of: as_of.valid_from: 'nk' is the master key; expected a version column of R$"),
    ("sold_at,valid_to,valid_to", r"--as-of: valid_to: 'valid_to' is valid_from too; expected the column that "
                                  r"ends a version$"),
    ("sold_at,starts,valid_to", r"--as-of: as_of.valid_from: column 'starts' is not in table 't\w+' \(columns: \['id', 'nk', "
                                r"'sk', 'valid_from', 'valid_to'\]\); expected the column that starts a version$"),
    ("sold_on,valid_from,valid_to", r"--as-of: as_of.event_time: 'sold_on' is not a column of the stream \(columns: "
                                    r"\['nk', 'sold_at', 'tid'\]\)$"),
])
def test_a_bad_as_of_is_one_line_and_exit_2(sqlite_backend, type2_sqlite, tmp_path, capsys, as_of, message):
    assert main(join_args(sqlite_backend, type2_sqlite, tmp_path, "hybridjoin", "--as-of", as_of)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("semijoin: error: ")
    assert re.search(message, err.strip())
    assert not (tmp_path / "out.parquet").exists()


def test_a_range_join_or_an_event_time_that_is_not_a_time_is_refused(sqlite_backend, type2_sqlite, tmp_path, capsys):
    args = join_args(sqlite_backend, type2_sqlite, tmp_path, "ssij", "--as-of", AS_OF, "--set", "range_lo=1")
    assert main(args) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--as-of: as_of: given with a range join (params.range_lo/range_hi) of ssij; expected an equality join, "
        "whose key's versions the lookup chooses from")
    pq.write_table(pa.table({"tid": [1], "nk": [2], "sold_at": pa.array([b"x"], pa.binary())}), tmp_path / "s.parquet")
    assert main(join_args(sqlite_backend, type2_sqlite, tmp_path, "hybridjoin", "--as-of", AS_OF)) == 2
    assert capsys.readouterr().err.strip() == (
        "semijoin: error: --as-of: as_of.event_time: column 'sold_at' of the stream is binary; expected a timestamp, date or number")


@pytest.fixture
def type2_sqlite(sqlite_backend, tmp_path):
    """R on SQLite and a stream file (tid, nk, sold_at); the table's name."""
    rng = np.random.default_rng(1)
    table = write_dimension(sqlite_backend, versions(rng))
    pq.write_table(stream_file(rng, 0, 50, (0, 190)), tmp_path / "s.parquet")
    return table


def test_run_join_refuses_a_store_that_does_not_read_the_version_columns(sqlite_backend, type2_sqlite, tmp_path):
    stream = pq.read_table(tmp_path / "s.parquet")
    with open_store(sqlite_backend.url, type2_sqlite, "nk", ["sk", "valid_to"]) as store:
        algorithm = create("hybridjoin", store, 2**20)
        with pytest.raises(ConfigError, match=rf"^as_of: the store of '{type2_sqlite}' does not read 'valid_from'; "
                                              "expected its select to hold the version columns$"):
            run_join(algorithm, stream, "nk", as_of=AsOf("sold_at", "valid_from", "valid_to"))
