"""The ``semijoin`` command line: join round trips and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.files import read_table, write_table
from airflow_provider_semijoin.workloads import generate_master, zipf_stream

MASTER_ROWS = 3000


@pytest.fixture(scope="module")
def master_url(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'm.db'}"
    generate_master(url, "product", MASTER_ROWS, seed=0)
    return url


@pytest.fixture
def stream_file(tmp_path):
    path = tmp_path / "s.parquet"
    write_table(path, zipf_stream(4000, MASTER_ROWS, exponent=1.0, missing=0.05, seed=3))
    return path


def join_args(master_url, stream, out, *extra):
    return [
        "join", "--algorithm", "hybridjoin", "--master", master_url, "--table", "product", "--key", "nk",
        "--select", "sk,name", "--stream", str(stream), "--stream-key", "nk", "--out", str(out), *extra,
    ]


@pytest.mark.parametrize("algorithm", ["inlj", "inlist", "meshjoin", "hybridjoin", "hybridjoin-l", "hybridjoin-pq"])
def test_join_writes_matched_unmatched_and_stats(master_url, stream_file, tmp_path, algorithm, capsys):
    out, unmatched, stats = tmp_path / "out.parquet", tmp_path / "bad.csv", tmp_path / "stats.json"
    args = join_args(master_url, stream_file, out, "--unmatched", str(unmatched), "--stats", str(stats), "--memory", "1MB")
    args[args.index("hybridjoin")] = algorithm
    assert main(args) == 0
    matched, missing = read_table(out), read_table(unmatched)
    assert matched.num_rows + missing.num_rows == 4000
    assert sorted(matched["tid"].to_pylist() + missing["tid"].to_pylist()) == list(range(4000))
    # surrogate keys are a permutation, so each one identifies its natural key: check pairs via R
    assert set(missing["reason"].to_pylist()) == {"not_in_master"}
    assert all(k % 2 == 0 for k in missing["nk"].to_pylist())  # absent keys are the even ones
    assert matched.column_names == ["tid", "nk", "qty", "amount", "sk", "name"]
    report = json.loads(stats.read_text())
    required = {
        "algorithm", "tuples_in", "tuples_matched", "tuples_unmatched", "service_rate_tps", "wall_s",
        "disk_queries", "disk_rows", "memory_budget_bytes", "structure_bytes_peak", "processing_ms_p50",
        "processing_ms_p99",
    }
    assert required <= set(report)
    assert report["algorithm"] == algorithm
    assert report["memory_budget_bytes"] == 2**20
    assert report["tuples_matched"] == matched.num_rows
    assert report["structure_bytes_peak"] <= 2**20
    assert "exactly once: yes" in capsys.readouterr().out


def test_join_reads_csv_and_sets_parameters(master_url, tmp_path):
    stream = tmp_path / "s.csv"
    pacsv.write_csv(pa.table({"tid": [0, 1, 2, 3], "nk": ["1", "x", "3", None]}), stream)
    out, bad, stats = tmp_path / "o.jsonl", tmp_path / "u.jsonl", tmp_path / "st.json"
    args = join_args(master_url, stream, out, "--unmatched", str(bad), "--set", "page_rows=64", "--stats", str(stats))
    assert main(args) == 0
    assert sorted(read_table(out)["tid"].to_pylist()) == [0, 2]
    reasons = dict(zip(read_table(bad)["tid"].to_pylist(), read_table(bad)["reason"].to_pylist()))
    assert reasons == {1: "bad_key", 3: "null_key"}
    assert json.loads(stats.read_text())["memory_split"]["page_rows"] == 64


@pytest.mark.parametrize(
    "change, message",
    [
        ({"--table": "nosuch"}, r"table: 'nosuch' does not exist"),
        ({"--key": "nokey"}, r"key: column 'nokey' is not in table 'product'"),
        ({"--select": "sk,ghost"}, r"select: column 'ghost' is not in table 'product'"),
        ({"--stream-key": "fk"}, r"stream-key: column 'fk' is not in the stream"),
        ({"--algorithm": "meshjion"}, r"algorithm: 'meshjion' is not one of \["),
        ({"--memory": "lots"}, r"memory: 'lots' is not a size"),
        ({"--memory": "2KB"}, r"memory: 2048 bytes is too small for hybridjoin"),
        ({"--table": "x; DROP TABLE product"}, r"table: 'x; DROP TABLE product' is not a valid identifier"),
        ({"--master": "postgres://h/db"}, r"master URL: scheme 'postgres' is not one of"),
        ({"--out": "/tmp/out.xlsx"}, r"out: '/tmp/out.xlsx' has suffix '.xlsx'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(master_url, stream_file, tmp_path, change, message, capsys):
    args = join_args(master_url, stream_file, tmp_path / "o.parquet")
    for option, value in change.items():
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("semijoin: error: ")
    assert __import__("re").search(message, err), err
    assert not (tmp_path / "o.parquet").exists()


def test_unknown_parameter_and_empty_stream(master_url, stream_file, tmp_path, capsys):
    assert main(join_args(master_url, stream_file, tmp_path / "o.parquet", "--set", "pagerows=5")) == 2
    assert "hybridjoin.pagerows: not a parameter of hybridjoin (parameters: ['page_rows', 'read_ahead', 'rider_repeats'])" in capsys.readouterr().err
    empty = tmp_path / "empty.parquet"
    write_table(empty, zipf_stream(0, MASTER_ROWS))
    assert main(join_args(master_url, empty, tmp_path / "o.parquet")) == 2
    assert "has no rows; expected at least one stream tuple" in capsys.readouterr().err


def test_password_never_reaches_the_error(stream_file, tmp_path):
    """A real process: no traceback, and the MySQL password of a failing URL is not printed."""
    url = "mysql://someone:s3cret-pw@127.0.0.1:1/db"
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_provider_semijoin.cli", *join_args(url, stream_file, tmp_path / "o.parquet")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cannot connect to MySQL at someone@127.0.0.1:1/db" in proc.stderr
    assert "s3cret-pw" not in proc.stderr + proc.stdout


def test_algorithms_lists_every_registry_entry_with_its_paper(capsys):
    assert main(["algorithms", "--json"]) == 0
    listed = {a["name"]: a for a in json.loads(capsys.readouterr().out)}
    assert set(listed) == {
        "inlj", "inlist", "inlist-lru", "meshjoin", "hybridjoin", "hybridjoin-l", "hybridjoin-pq",
        "ssj", "cmeshjoin", "cachejoin", "cachejoin-l", "cachejoin-pq", "ssij",
    }
    assert "Algorithm 1" in listed["cmeshjoin"]["paper"]
    assert "sec. IV" in listed["ssij"]["paper"] and listed["ssij"]["params"]["max_scan"]["default"] == 200
    assert "sec. 4" in listed["hybridjoin-pq"]["paper"]
    assert listed["hybridjoin-l"]["params"]["lookup_position"]["default"] == 0.3


def test_generate_master_and_stream(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'g.db'}"
    assert main(["generate", "master", "--db", url, "--rows", "500", "--key-type", "str"]) == 0
    assert main(["generate", "master", "--db", url, "--rows", "500", "--key-type", "str"]) == 0
    out = capsys.readouterr().out
    assert "wrote 500 rows (str keys)" in out and "kept 500 rows" in out
    path = tmp_path / "s.jsonl"
    assert main(["generate", "stream", "--out", str(path), "--rows", "300", "--master-rows", "500",
                 "--key-type", "str", "--rate", "1000", "--shape", "random"]) == 0
    stream = read_table(path)
    assert stream.num_rows == 300 and stream["nk"][0].as_py().startswith("P-")
    arrivals = stream["arrival_s"].to_pylist()
    assert arrivals == sorted(arrivals) and 0.2 < 300 / arrivals[-1] / 1000 < 5


@pytest.mark.parametrize("flag, value", [("--rows", "3000000000"), ("--master-rows", "3000000000")])
def test_a_stream_too_large_to_hold_is_one_sentence_before_any_allocation(tmp_path, capsys, flag, value):
    """(Found by the hostile-input run: --rows 3000000000 allocated 22 GiB and was killed.)"""
    sizes = {"--rows": "10", "--master-rows": "10", flag: value}
    argv = ["generate", "stream", "--out", str(tmp_path / "s.parquet"), *[x for kv in sizes.items() for x in kv]]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"semijoin: error: {flag}: {value} is more than the 200,000,000 "
                                       f"{'tuples of one table' if flag == '--rows' else 'keys of R'} the generator "
                                       "holds in memory (8 bytes each); expected at most 200000000\n")
    assert not (tmp_path / "s.parquet").exists()
