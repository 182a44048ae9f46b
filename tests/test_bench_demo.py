"""``semijoin bench`` at a tiny size and ``semijoin demo`` (the main job): they run and check what they claim.

Speed is never asserted here: the benchmark measures it, tests only check that the report is
complete and consistent (each algorithm measured, within its memory budget, rates positive).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.bench.server import server_cache_line
from airflow_provider_semijoin.bench.steady import BenchConfig, bench_master, measure, transient_notes
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.demo_warehouse import move_customer, version_at
from airflow_provider_semijoin.workloads.scd import TIME_FORMAT, generate_versioned_master, iso_utc

REPO = Path(__file__).resolve().parents[1]
from airflow_provider_semijoin.core.stores import DatabaseURL


def test_bench_tiny_reports_every_algorithm_and_shape(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["bench", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "5000", "--memory", "512KB",
            "--warmup", "0.2", "--window", "0.3", "--out", str(out), "--set", "hybridjoin-l.lookup_position=0.5"]
    assert main(args) == 0
    report = json.loads(out.read_text())
    results = report["results"]
    assert {(r["algorithm"], r["shape"]) for r in results} == {(a, s) for a in ALGORITHMS for s in ["noperm", "random"]}
    for r in results:
        assert r["service_rate_tps"] > 0 and r["tuples_in_window"] > 0
        assert (r["cache_hit_ratio"] is not None) == (r["algorithm"] in ("inlist-lru", "ssj", "cmeshjoin", "cachejoin", "cachejoin-l", "cachejoin-pq", "ssij"))
        assert r["memory_ok"] and r["structure_bytes_peak"] <= 512 * 1024
        if r["algorithm"] == "inlist-lru":  # no cost model
            assert r["predicted_tps"] is None
        else:
            assert r["predicted_tps"] > 0 and r["measured_over_predicted"] > 0 and r["model"]
    assert all(v > 0 for v in report["costs"].values())
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("noperm  hybridjoin ") for line in lines)
    assert report["config"]["params"] == {"hybridjoin-l.lookup_position": "0.5"}


def test_a_variant_runs_its_algorithm_with_its_own_settings_on_top(tmp_path, capsys):
    """``NAME@LABEL`` measures NAME again, with NAME's --set and then its own, under its label."""
    out = tmp_path / "bench.json"
    args = ["bench", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "5000", "--memory", "512KB",
            "--warmup", "0.2", "--window", "0.3", "--out", str(out), "--shapes", "noperm",
            "--algorithms", "hybridjoin-pq,hybridjoin-pq@sqrt", "--set", "hybridjoin-pq.decay=0.8",
            "--set", "hybridjoin-pq@sqrt.threshold_rule=sqrt"]
    assert main(args) == 0
    results = {r["algorithm"]: r for r in json.loads(out.read_text())["results"]}
    assert list(results) == ["hybridjoin-pq", "hybridjoin-pq@sqrt"]
    settings = {name: (r["settings"]["threshold_rule"], r["settings"]["decay"]) for name, r in results.items()}
    assert settings == {"hybridjoin-pq": ("mean", 0.8), "hybridjoin-pq@sqrt": ("sqrt", 0.8)}
    assert all(r["service_rate_tps"] > 0 and r["predicted_tps"] > 0 for r in results.values())  # the model of NAME
    assert any(line.startswith("noperm  hybridjoin-pq@sqrt ") for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shapes": ["noperm", "zipfy"]}, r"shapes\[1\]: 'zipfy' is not one of"),
        ({"algorithms": ["hybridjoin", "hybrid"]}, r"algorithms\[1\]: 'hybrid' is not one of"),
        ({"params": {"page_rows": "5"}}, r"--set page_rows: expected ALGORITHM.NAME=VALUE"),
        ({"window_s": 0}, r"window: warm-up 10.0 s and window 0 s"),
        ({"sweep_cache": [0.1, 1.5]}, r"sweep_cache\[1\]: 1.5 is not a share of the memory"),
        ({"io_samples": -2}, r"io_samples: -2 is not a whole number >= 0"),
        ({"shapes": ["temporal", "uniform"]}, r"shapes\[1\]: 'uniform' is not one of \['noperm', 'random', 'temporal'\]"),
        ({"sweep_max_scan": [10, 0]}, r"sweep_max_scan\[1\]: 0 is not a number of pages >= 1"),
        ({"temporal_interval": 0}, r"temporal_interval: 0 is not a whole number >= 1"),
        ({"temporal_fraction": 0.0}, r"temporal_fraction: 0.0 is not a share of R's keys in \(0, 1\]"),
        ({"dbms_join": True}, r"dbms_join: the comparison runs inside MySQL/MariaDB; 'sqlite:///x.db' is not one"),
        ({"warmup_turnovers": -1}, r"warmup_turnovers: -1 is not a number of turnovers >= 0"),
        ({"warmup_max_s": 5.0}, r"warmup_max_s: 5.0 is not seconds >= the warm-up's 10"),
        ({"algorithms": ["ssj", "hybrid@x"]}, r"algorithms\[1\]: 'hybrid' is not one of"),
        ({"algorithms": ["ssj@Big"]}, r"algorithms\[0\]: 'ssj@Big': a variant is NAME@LABEL with LABEL of a-z, 0-9"),
        ({"algorithms": ["ssj", "ssj"]}, r"algorithms: \['ssj', 'ssj'\] names one twice \(a variant needs a label"),
        ({"params": {"hybrid@x.decay": "1"}}, r"--set hybrid@x.decay: expected ALGORITHM.NAME=VALUE"),
    ],
)
def test_bench_config_errors_name_the_field(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        BenchConfig(master="sqlite:///x.db", **kwargs)


def tiny_bench(tmp_path, **timing) -> tuple[BenchConfig, str]:
    """A bench of R = 5,000 rows on SQLite, 512 KiB, the noperm shape, the store's own S and T,
    with the warm-up and window of ``timing``; and the table of R."""
    master = f"sqlite:///{tmp_path / 'b.db'}"
    table, _ = bench_master(master, 5000, out=lambda _line: None)
    return BenchConfig(master=master, rows=5000, memory=512 * 1024, shapes=["noperm"], io_samples=0, **timing), table


@pytest.mark.parametrize("name", ["hybridjoin", "cachejoin"])
def test_the_warm_up_lasts_until_the_tuples_held_turned_over(tmp_path, name):
    """The window opens once H_S (a front stage's disk phase) turned over ``warmup_turnovers``
    times, not when the clock says, unless ``warmup_max_s`` comes first: then the report says so."""
    config, table = tiny_bench(tmp_path, warmup_s=0.0, window_s=0.1, warmup_turnovers=3.0)
    waited = measure(config, table, name, "noperm")
    assert waited["warmup_turnovers"] >= 3.0 and waited["tuples_in_window"] > 0
    assert transient_notes([waited], config) == []
    cut = dataclasses.replace(config, warmup_max_s=0.0)
    short = measure(cut, table, name, "noperm")
    assert short["warmup_turnovers"] < 3.0
    assert transient_notes([short], cut) == [
        f"note: the warm-up stopped at 0 s before 3 turnovers of the tuples held for (turnovers reached): "
        f"noperm {name} {short['warmup_turnovers']:g}"]


def test_the_window_closes_at_the_end_of_a_cycle(tmp_path, monkeypatch):
    """SSIJ's tuples leave in bursts, at its join phases: the warm-up and the window end only
    with a step that left SB empty and no phase open (here, with R partly cached, one that ended
    a join phase), so the window counts whole cycles; a window of 1 ms would otherwise close
    after the first step, mid-cycle."""
    from airflow_provider_semijoin.core.joins.ssij import SemiStreamedIndexJoin

    states = []
    step = SemiStreamedIndexJoin.step

    def recording(self, buffer):
        out = step(self, buffer)
        states.append((self.cycle_ended, self._phase is None and self._sb.size == 0, self.counters.join_phases))
        return out

    monkeypatch.setattr(SemiStreamedIndexJoin, "step", recording)
    config, table = tiny_bench(tmp_path, warmup_s=0.0, window_s=0.001, warmup_turnovers=1.0)
    result = measure(config, table, "ssij", "noperm")
    ended = [i for i, (cycle_ended, _, _) in enumerate(states) if cycle_ended]
    assert all(idle for cycle_ended, idle, _ in states if cycle_ended)  # a cycle ends with SB empty
    assert ended[-1] == len(states) - 1 and len(ended) >= 2  # the window closed at the end of one
    assert result["window_cycles"] >= 1
    opened = ended[-1 - result["window_cycles"]]  # the step whose cycle end closed the warm-up
    assert states[-1][2] - states[opened][2] == result["window_cycles"]  # one join phase a cycle
    assert len(states) - 1 - opened > 1  # the window held more than the step that closed it


def test_ssij_with_all_of_r_cached_ends_a_cycle_at_each_online_phase(tmp_path, monkeypatch):
    """With every page of R in CR, SSIJ's online phases discard each tuple (Alg. 1 lines 9-11):
    SB stays empty and no join phase comes. Each online phase is then a whole cycle, so the
    warm-up and the window end within a few steps; when only a join phase ended one, the window
    ran to its cap (a clock reading a millisecond on: a thousand steps). A uniform stream over R
    (Zipf 0) makes every page worth keeping, so CR holds all of R after a join phase or two."""
    from airflow_provider_semijoin.core.joins.ssij import SemiStreamedIndexJoin

    states = []
    step = SemiStreamedIndexJoin.step

    def recording(self, buffer):
        out = step(self, buffer)
        states.append((self.cycle_ended, self.cache.pages == self.page_map.n_pages and self._sb.size == 0))
        return out

    monkeypatch.setattr(SemiStreamedIndexJoin, "step", recording)
    master = f"sqlite:///{tmp_path / 'b.db'}"
    table, _ = bench_master(master, 1000, out=lambda _line: None)
    config = BenchConfig(master=master, rows=1000, memory=2 * 2**20, zipf=0.0, shapes=["noperm"], io_samples=0,
                         warmup_s=0.0, window_s=0.01, warmup_turnovers=1.0, warmup_max_s=10.0)
    ticks = itertools.count()
    result = measure(config, table, "ssij", "noperm", clock=lambda: next(ticks) * 1e-3)
    window = states[len(states) - result["window_cycles"]:]
    assert 1 <= result["window_cycles"] <= 5 and len(states) < 300  # (the window's cap alone: a thousand steps)
    assert all(ended and all_cached for ended, all_cached in window)  # each step of the window a whole cycle
    assert result["extra"]["join_phases"] >= 1 and result["cache_hit_ratio"] < 1  # R was read into CR first


def test_the_window_counts_the_cpu_clock_around_each_step_alone(tmp_path):
    """The CPU an iteration is ``cpu_clock``'s advance over the steps (the joining thread's, by
    default), not over the bench's own work between them."""
    ticks = itertools.count()
    config, table = tiny_bench(tmp_path, warmup_s=0.0, window_s=0.001, warmup_turnovers=1.0)
    result = measure(config, table, "hybridjoin", "noperm", cpu_clock=lambda: next(ticks) * 1e-3)
    assert result["iteration"]["cpu_ms"] == pytest.approx(1.0)  # one reading before a step, one after


def test_a_meshjoin_window_holds_whole_scans_of_r(tmp_path):
    """MESHJOIN's tuples leave with the partition of R that holds their key, and on the noperm
    shape the first partition holds most of the stream: a window that could close after any
    step counted 6,878 tuples where its steps admitted 9,170. Its cycle is a scan of all k
    partitions, so the window's completions are what its scans admitted."""
    config, table = tiny_bench(tmp_path, warmup_s=0.0, window_s=0.001, warmup_turnovers=2.0)
    result = measure(config, table, "meshjoin", "noperm")
    split = result["memory_split"]
    admitted = split["chunk_tuples"] * split["partitions"] * result["window_cycles"]
    assert split["partitions"] > 1 and result["window_cycles"] >= 1
    assert result["tuples_in_window"] == pytest.approx(admitted, rel=0.05)


@pytest.mark.parametrize("name, per", [("meshjoin", "step"), ("hybridjoin", "step"), ("cachejoin", "step"),
                                       ("ssij", "cycle")])
def test_the_window_splits_its_rate_into_the_iteration_of_the_model(tmp_path, name, per):
    """A rate is tuples an iteration over its seconds, measured and modelled alike (SSIJ's model
    prices a cycle, the others a step); MESHJOIN over whole scans completes the w tuples a step
    its model says (H_S full)."""
    config, table = tiny_bench(tmp_path, warmup_s=0.0, window_s=0.001, warmup_turnovers=1.0)
    result = measure(config, table, name, "noperm")
    it = result["iteration"]
    predicted = result.get("predicted_tps_at_measured_hits") or result["predicted_tps"]
    assert it["per"] == per
    assert it["tuples"] / it["ms"] * 1e3 == pytest.approx(result["service_rate_tps"], rel=2e-3)
    assert it["model_tuples"] / it["model_ms"] * 1e3 == pytest.approx(predicted, rel=2e-3)
    assert 0 < it["cpu_ms"] <= it["ms"] * 1.01 + 0.01  # the joining thread's CPU, within its wall clock
    assert 0 < it["model_cpu_ms"] < it["model_ms"]  # the model's c_loop without its I/O
    if per == "cycle":
        assert it["tuples"] == pytest.approx(result["tuples_in_window"] / result["window_cycles"], abs=0.1)
    if name == "meshjoin":
        assert it["tuples"] == pytest.approx(it["model_tuples"], rel=0.05)


def test_a_front_stage_ends_a_cycle_with_its_disk_phase(tmp_path, monkeypatch):
    """SSJ's window closes when its MESHJOIN has scanned all of R, not after any step."""
    from airflow_provider_semijoin.core.joins.frontstage import SemiStreamJoin

    states = []
    step = SemiStreamJoin.step

    def recording(self, buffer):
        out = step(self, buffer)
        states.append((self.cycle_ended, self.algorithm._next_partition))
        return out

    monkeypatch.setattr(SemiStreamJoin, "step", recording)
    config, table = tiny_bench(tmp_path, warmup_s=0.0, window_s=0.001, warmup_turnovers=1.0)
    measure(config, table, "ssj", "noperm")
    assert [ended for ended, _ in states] == [scan == 0 for _, scan in states]
    assert states[-1][0] and sum(ended for ended, _ in states) < len(states) / 2


def test_a_front_stage_with_all_of_r_in_h_r_ends_a_cycle_at_each_step(tmp_path, monkeypatch):
    """SSJ whose H_R holds every key of R (a uniform stream, Zipf 0): once H_R has learnt them,
    no tuple misses, its MESHJOIN gets none and its H_S empties part way through a scan of R's
    8 partitions, which never goes on. No tuple waits for the rest of a scan, so each step ends
    a cycle; when only the scan's end did, warm-up and window both ran to their caps (a clock
    reading a millisecond on: about 80 steps each)."""
    from airflow_provider_semijoin.core.joins.frontstage import SemiStreamJoin

    states = []
    step = SemiStreamJoin.step

    def recording(self, buffer):
        out = step(self, buffer)
        states.append((self.cycle_ended, self.algorithm.pending == 0 and self.algorithm._next_partition != 0))
        return out

    monkeypatch.setattr(SemiStreamJoin, "step", recording)
    master = f"sqlite:///{tmp_path / 'b.db'}"
    table, _ = bench_master(master, 1000, out=lambda _line: None)
    config = BenchConfig(master=master, rows=1000, memory=2**20, zipf=0.0, shapes=["noperm"], io_samples=0,
                         warmup_s=0.0, window_s=0.01, warmup_turnovers=3.0, warmup_max_s=0.5)
    ticks = itertools.count()
    result = measure(config, table, "ssj", "noperm", clock=lambda: next(ticks) * 1e-3,
                     params={"cache_keys": 1000, "page_rows": 64, "partition_pages": 2})
    window = states[len(states) - result["window_cycles"]:]
    assert result["memory_split"]["inner.partitions"] == 8 and result["warmup_turnovers"] >= 3
    assert 1 <= result["window_cycles"] <= 5 and len(states) < 40
    assert all(ended and stopped_mid_scan for ended, stopped_mid_scan in window)


def test_sweep_cache_reports_an_optimum_per_algorithm_and_variant(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    args = ["bench", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "4000", "--memory", "512KB",
            "--warmup", "0.1", "--window", "0.2", "--shapes", "noperm",
            "--algorithms", "meshjoin,cmeshjoin,cachejoin,cachejoin@lru", "--set", "cachejoin@lru.eviction=lru",
            "--sweep-cache", "0.02,0.2", "--out", str(out)]
    assert main(args) == 0
    sweep = json.loads(out.read_text())["sweep"]
    assert sweep["shares"] == [0.02, 0.2]
    names = ("cmeshjoin", "cachejoin", "cachejoin@lru")
    assert {(r["algorithm"], r["cache_share"]) for r in sweep["results"]} == {(a, s) for a in names for s in (0.02, 0.2)}
    for r in sweep["results"]:
        assert r["memory_split"]["cache_keys"] == r["cache_keys"] and r["predicted_tps"] > 0
        assert r["settings"].get("eviction") == ("lru" if r["algorithm"] == "cachejoin@lru" else "lfu")
    assert [o["algorithm"] for o in sweep["optima"]] == list(names)
    for o in sweep["optima"]:
        assert o["measured_best_share"] in (0.02, 0.2) and o["predicted_best_share"] in (0.02, 0.2)
        assert o["model_best_cache_keys"] > 0 and o["eq4_best_cache_keys"] > 0
    printed = capsys.readouterr().out
    assert "optimum size of H_R" in printed and "noperm  cachejoin" in printed


def test_sweep_cache_option_names_a_bad_share(tmp_path, capsys):
    assert main(["bench", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--sweep-cache", "0.1,lots"]) == 2
    assert "--sweep-cache[1]: 'lots' is not a number" in capsys.readouterr().err


@pytest.mark.timeout(1800)  # the shared demo run (tests/conftest.py) may be set up here
def test_the_readmes_first_command_runs_the_main_job_exactly_once_without_deadline_misses(readme_demo):
    """``.ci/setup && .venv/bin/semijoin demo`` word for word, at its defaults (200,000 sales,
    250,000 dimension rows), from a checkout with no demo home yet: it exits 0, the DAG run
    succeeds with every task, every sale leaves exactly once against the oracle, and no sale
    misses its deadline once the stream runs (the generator's clock starts after Spark's warm-up)."""
    proc, out, home = readme_demo.proc, readme_demo.out, readme_demo.home
    assert readme_demo.command == ".ci/setup && .venv/bin/semijoin demo"
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert re.search(r"join     \[#{30}\] 100% 200,000/200,000 sales", out)
    assert re.search(r"dag run  manual__\S+: success \(changes_dim_customer success, changes_dim_product success, "
                     r"deadline_monitor (success|skipped), surrogate_keys success\)", out)
    assert "changes committed with plain SQL by another process while the join ran, captured by triggers: " \
           "changes_dim_product success, changes_dim_customer success" in out
    assert re.search(r"master   dim_product 200,000 rows, dim_customer 50,000 customers in 5[0-9],[0-9]{3} versions \(type 2\)", out)
    assert "input    200,000 sales" in out
    assert "updates  40 product category and 40 customer moves: changes committed" in out
    moved = re.search(r"customers type 2 \(5[0-9],[0-9]{3} versions of 50,000 customers at the start\), 40 moves committed while "
                      r"the join ran \(the current version closed, a new one inserted, one transaction each\); every sale has "
                      r"the version valid at its sold_at: yes \(([\d,]+) sales after a move\)", out)
    assert moved and int(moved.group(1).replace(",", "")) > 0, re.findall(r"^customers.*$", out, re.M)
    assert ("exactly once against the as-of oracle (hash join of the stream with the dimensions, the customer as of sold_at): "
            "yes (lost 0, duplicated 0, wrong keys 0") in out
    facts = int(re.search(r"matched  ([\d,]+) facts", out).group(1).replace(",", ""))
    dead = int(re.search(r"-> dead letters \(([\d,]+)\)", out).group(1).replace(",", ""))
    assert facts + dead == 200_000 and 0 < dead < 10_000  # 1% of customer keys are unknown, Zipf-drawn
    assert re.search(r"deadline 10(\.0)? s: 0 of 200,000 sales missed it", out), re.findall(r"^latency.*$", out, re.M)
    assert f"AIRFLOW_HOME={home} " in out and " api-server --port " in out  # tests/plugins/test_demo_ui.py runs it
    assert (home / "airflow.cfg").exists()
    # the UI user's password: in its file (this user only), never in the output or any log
    passwords = home / "simple_auth_manager_passwords.json.generated"
    password = json.loads(passwords.read_text())["admin"]
    assert passwords.stat().st_mode & 0o077 == 0 and len(password) >= 12
    logs = sorted(home.rglob("*.log"))
    assert any(p.name == "api-server.log" for p in logs) and any(p.name == "dag-run.log" for p in logs)
    assert [str(p) for p in logs if password in p.read_text(errors="replace")] == []
    assert password not in out + proc.stderr


def test_a_customer_move_closes_the_current_version_and_opens_a_new_one_in_one_transaction(tmp_path):
    """The demo's upstream moves a customer of the type-2 dimension: its current version ends at
    the move time, a new version (the next surrogate key, another city) is valid from then; a
    move time before the current version began moves it a second after that instead."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    generate_versioned_master(url, "dim_customer", 50, share=0.0, max_versions=1, changes_from=1.7e9, changes_to=1.7e9 + 50)
    connection = DatabaseURL.parse(url).connect()
    try:
        move_customer(connection, 7, 1.7e9 + 20, np.random.default_rng(0))
        versions = connection.execute('SELECT sk, city, valid_from, valid_to FROM "dim_customer" WHERE nk = 7 ORDER BY valid_from').fetchall()
        began = datetime.strptime(versions[1][2], TIME_FORMAT).replace(tzinfo=timezone.utc).timestamp()
        move_customer(connection, 7, 1.7e9, np.random.default_rng(0))  # before the version it moves from began
        latest = connection.execute('SELECT sk, valid_from, valid_to FROM "dim_customer" WHERE nk = 7 ORDER BY valid_from').fetchall()
    finally:
        connection.close()
    (old_sk, old_city, _, old_to), (new_sk, new_city, new_from, new_to) = versions
    assert (old_to, new_from, new_to) == (iso_utc(1.7e9 + 20), iso_utc(1.7e9 + 20), None)
    assert new_sk == 51 and old_sk != new_sk and new_city != old_city
    assert [row[0] for row in latest] == [old_sk, 51, 52]
    assert latest[1][2] == latest[2][1] == iso_utc(began + 1) and latest[2][2] is None


def test_the_oracle_picks_the_version_valid_at_the_sale_s_time():
    versions = [(10, 0, 100), (11, 100, 250), (12, 250, None)]
    assert [version_at(versions, t) for t in (-1, 0, 99, 100, 249, 250, 10**12)] == [None, 10, 10, 11, 11, 12, 12]
    assert version_at([(10, 0, 100), (11, 50, None)], 60) is None  # overlapping versions: no single answer


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_demos_api_server_ends_when_the_demo_is_killed(tmp_path):
    """The demo starts its API server in a session of its own, so a kill of the demo's process
    group misses it; the server is started to end with the demo however the demo ends. Here a
    parent starts a long sleep the same way and is SIGKILLed: the sleep ends too."""
    code = ("import subprocess, sys, time; from airflow_provider_semijoin.demo import _ends_with_this_process; "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True, "
            "preexec_fn=_ends_with_this_process()); print(child.pid, flush=True); time.sleep(300)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    child = int(parent.stdout.readline())
    assert _running(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _running(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, f"the child {child} outlived its SIGKILLed parent by 30 s"


@pytest.mark.acceptance  # a whole small demo, SIGTERMed (the first tier runs the README's demo itself)
def test_a_demo_stopped_mid_run_ends_and_leaves_nothing_running(tmp_path, demo_run):
    """SIGTERM (a CI timeout, ``kill``) once the join streams: the demo ends, and nothing it
    started is left - no process of its session (the LocalExecutor's workers, the tasks, Spark)
    and no API server on its port. Before, ``dag.test`` left its executor's workers running, and
    the demo's exit waited for them forever."""
    demo = demo_run.start(tmp_path / "home", "--stream-rows", "40000", "--product-rows", "5000",
                          "--customer-rows", "2000", "--rate", "2000")
    lines: list[str] = []
    streaming = threading.Event()

    def read() -> None:
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("join     ["):
                streaming.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert streaming.wait(300), "".join(lines)[-3000:]
        port = int(re.search(r"API server on 127\.0\.0\.1:(\d+)", "".join(lines)).group(1))
        demo.terminate()
        try:
            code = demo.wait(120)
        except subprocess.TimeoutExpired:
            code = None
        assert code is not None, "the demo did not end within 120 s of SIGTERM"
        assert code != 0
        deadline = time.monotonic() + 30
        while (demo_run.session_processes(demo.pid) or _listening(port)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert demo_run.session_processes(demo.pid) == [] and not _listening(port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no reaper collected has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ssij_experiments_report_policies_max_scan_and_the_temporal_shape(tmp_path, capsys):
    out = tmp_path / "ssij.json"
    args = ["bench", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "6000", "--memory", "256KB",
            "--warmup", "0.1", "--window", "0.2", "--shapes", "noperm,temporal", "--temporal-interval", "3000",
            "--algorithms", "ssij,meshjoin", "--ssij-policies", "--sweep-max-scan", "1,8", "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert {(r["algorithm"], r["shape"]) for r in report["results"]} == {
        (a, s) for a in ("ssij", "meshjoin") for s in ("noperm", "temporal")}
    temporal = [r for r in report["results"] if r["shape"] == "temporal"]
    assert all(r["predicted_tps"] is None and r["service_rate_tps"] > 0 for r in temporal)  # no model for it
    policies = report["ssij_policies"]["results"]
    assert [(r["shape"], r["cache_policy"]) for r in policies] == [
        ("noperm", "utility"), ("noperm", "lru"), ("temporal", "utility"), ("temporal", "lru")]
    scans = report["ssij_max_scan"]["results"]
    assert [(r["shape"], r["max_scan"]) for r in scans] == [("noperm", 1), ("noperm", 8), ("temporal", 1), ("temporal", 8)]
    assert [r["memory_split"]["max_scan"] for r in scans if r["max_scan"] == 1] == [1, 1]
    for r in policies + scans:
        extra = r["extra"]  # a sequence is read by range (its pages) or, when sparse, by one IN query of its keys
        assert r["memory_ok"] and extra["pages_read"] + extra.get("pages_by_in", 0) >= extra["pages_requested"] > 0
    printed = capsys.readouterr().out
    assert "SSIJ cache policy, Zipf 1.0" in printed and "SSIJ maxScan, Zipf 1.0" in printed


@pytest.fixture
def bench_rows(mysql_url):
    """A row count of its own (the bench names R after it) and R dropped afterwards."""
    rows = 5000 + uuid.uuid4().int % 100_000
    yield rows
    connection = DatabaseURL.parse(mysql_url).connect()
    cursor = connection.cursor()
    cursor.execute(f"DROP TABLE IF EXISTS bench_r{rows}")
    cursor.execute("DELETE FROM semijoin_datasets WHERE table_name = %s", (f"bench_r{rows}",))
    connection.close()


@pytest.mark.mysql
def test_dbms_join_runs_one_statement_inside_mysql(mysql_url, bench_rows, tmp_path, capsys):
    out = tmp_path / "dbms.json"
    args = ["bench", "--master", mysql_url, "--rows", str(bench_rows), "--memory", "256KB", "--warmup", "0.1",
            "--window", "0.2", "--shapes", "noperm", "--algorithms", "ssij", "--dbms-join", "--dbms-chunk", "3000",
            "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    dbms = report["dbms_join"]
    assert dbms["buffer_pool_bytes"] == report["server_cache"]["buffer_pool_bytes"] > 0  # the pool R was read through
    assert [r["run"] for r in dbms["dbms"]] == ["cold buffer pool", "warm buffer pool", "aggregated, no result"]
    assert all(r["result_rows"] == 3000 and r["tuples_per_s"] > 0 for r in dbms["dbms"])  # every key is in R
    assert any(p["type"] == "eq_ref" for p in dbms["plan"])  # an index lookup of R per stream tuple
    assert dbms["ssij"]["service_rate_tps"] > 0 and dbms["ssij_over_best_dbms"] > 0
    assert "DBMS index join vs SSIJ (Figure 9)" in capsys.readouterr().out


@pytest.mark.mysql
def test_the_bench_says_whether_r_fits_in_the_servers_buffer_pool(mysql_url, bench_rows):
    printed = []
    table, cache = bench_master(mysql_url, bench_rows, printed.append)
    connection = DatabaseURL.parse(mysql_url).connect()
    cursor = connection.cursor()
    cursor.execute("SELECT @@innodb_buffer_pool_size")
    pool = int(cursor.fetchone()[0])
    connection.close()
    assert table == f"bench_r{bench_rows}"
    assert cache["buffer_pool_bytes"] == pool
    assert 8 * bench_rows <= cache["r_bytes"] <= pool  # every row holds its 8-byte key; a few MB of R fit
    assert cache["r_fits"] and printed[-1].endswith("R fits in it")


@pytest.mark.parametrize("flush, source", [("O_DIRECT", "from disk"), ("fsync", "from the OS's file cache or disk")])
def test_the_cache_line_says_where_a_page_not_in_the_pool_comes_from(flush, source):
    cache = {"buffer_pool_bytes": 128 * 2**20, "flush_method": flush, "r_bytes": 248 * 2**20, "r_fits": False}
    assert server_cache_line(cache) == ("server cache: InnoDB buffer pool 128 MiB, R 248 MiB on the server; "
                                        f"R does not fit: a page of R not in the pool is read {source}")


def test_an_sqlite_master_has_no_server_cache_to_report(tmp_path):
    printed = []
    table, cache = bench_master(f"sqlite:///{tmp_path / 'b.db'}", 3000, printed.append)
    assert cache is None and len(printed) == 1 and printed[0].startswith("master sqlite:///")


def test_access_bench_times_every_kind_of_access_to_r(tmp_path, capsys):
    out = tmp_path / "access.json"
    args = ["bench", "--access", "--master", f"sqlite:///{tmp_path / 'b.db'}", "--rows", "3000", "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    kinds = [re.sub(r"\d[\d,]*", "N", r["access"]) for r in report["results"]]
    assert kinds == ["point query", "range read of a page (N rows) at random places", "IN (...) of N scattered keys",
                     "IN (...) of N scattered keys", "IN (...) of N scattered keys",
                     "IN (...) of N keys of a page just read",
                     "full scan, N pages a query"]
    assert report["server_cache"] is None  # SQLite: the OS caches its file
    scan = report["results"][-1]
    assert scan["count"] == scan["rows_found"] == 3000 and scan["unit"] == "rows"  # the scan read R once, every row
    looked_up = [r for r in report["results"] if r["unit"] in ("queries", "keys")]
    assert [r["unit"] for r in looked_up] == ["queries"] + ["keys"] * 4
    assert all(0 < r["count"] == r["rows_found"] <= 3000 for r in looked_up)  # every key timed is one of R's
    assert all(r["per_s"] > 0 for r in report["results"])
    printed = capsys.readouterr().out.splitlines()
    header = printed.index(next(line for line in printed if line.startswith("one access to R = 3,000 rows"))) + 1
    assert printed[header].split()[-3:] == ["ms", "a", "query"]
    per_query = [line.split()[-1] for line in printed[header + 1 : header + 8]]  # a time a query where a query reads rows
    assert per_query == [f"{r['ms_per_query']:.2f}" if r["unit"] == "rows" else "-" for r in report["results"]]


def test_the_bench_clock_stops_only_while_the_stream_is_produced(tmp_path, monkeypatch):
    """Producing a stream chunk (here: 1,000 s on a fake clock) is not charged to the join; the
    steps and what lies between them are: the rate is the tuples over the clock's other ticks."""
    from airflow_provider_semijoin.bench import steady

    now = [0.0]

    def clock():
        now[0] += 1e-4
        return now[0]

    def slow_chunks(config, shape, produce=steady.stream_chunks):
        for chunk in produce(config, shape):
            now[0] += 1000.0
            yield chunk

    monkeypatch.setattr(steady, "stream_chunks", slow_chunks)
    config, table = tiny_bench(tmp_path, warmup_s=0.05, window_s=0.2, warmup_turnovers=1.0)
    result = measure(config, table, "hybridjoin", "noperm", clock=clock)
    assert 0.05 <= result["warmup_s"] < 1.0 and 0.2 <= result["window_s"] < 1.0
    # the rate is the tuples over the window's seconds, which the result rounds to the millisecond
    # (at a 0.2 s window that rounding alone moved tuples / window_s by up to 0.25%: CI failed at 0.15%)
    assert result["tuples_in_window"] / result["service_rate_tps"] == pytest.approx(result["window_s"], abs=5e-4 + 1e-6)


def test_a_stopwatch_leaves_out_the_spans_it_was_stopped():
    from airflow_provider_semijoin.bench.steady import Stopwatch

    ticks = iter([10.0, 12.0, 13.0, 20.0, 21.0])
    watch = Stopwatch(lambda: next(ticks))  # made at 10
    assert watch.read() == 2.0
    with watch.stopped():  # 13 -> 20
        pass
    assert watch.read() == 4.0  # 21 - 10 - 7


def test_processing_seconds_run_from_the_step_taking_a_tuple_to_the_step_it_left_in():
    """Tuples 0-2 taken at 1.0 s, 3-4 at 2.5 s; 1 and 3 left (1 with two matches, counted
    once) in a step ending at 3.0 s, 0 unmatched in one ending at 4.0 s; 2 and 4 never left."""
    from airflow_provider_semijoin.bench.steady import ProcessingSample

    sample = ProcessingSample()
    assert sample.processing_seconds().size == 0
    sample.took(np.array([0, 1, 2]), 1.0)
    sample.took(np.array([3, 4]), 2.5)
    assert sample.processing_seconds().size == 0  # none left yet
    sample.left(np.array([1, 3, 1]), np.zeros(0, np.int64), 3.0)
    sample.left(np.zeros(0, np.int64), np.array([0]), 4.0)
    assert sorted(sample.processing_seconds().tolist()) == [0.5, 2.0, 3.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 40)), min_size=1, max_size=60), st.integers(1, 64),
       st.randoms(use_true_random=False))
def test_a_processing_sample_keeps_at_most_its_bound_and_is_the_exact_times_of_the_ids_it_kept(steps, most, rng):
    """Steps each take ``n`` new tuples and let ``k`` of those held leave (in any order): the
    sample holds at most ``most`` takes and leavings, its stride is the smallest power of two that
    keeps them under the bound, and its times are exactly those of the kept ids."""
    from airflow_provider_semijoin.bench.steady import ProcessingSample

    sample = ProcessingSample(most=most)
    entered, held, exact = {}, [], {}
    next_id = 0
    for step, (n, k) in enumerate(steps):
        ids = np.arange(next_id, next_id + n)
        next_id += n
        sample.took(ids, float(step))
        entered.update({int(i): float(step) for i in ids})
        held += ids.tolist()
        rng.shuffle(held)
        leaving, held = held[:k], held[k:]
        sample.left(np.array(leaving, np.int64), np.zeros(0, np.int64), step + 0.5)
        exact.update({i: step + 0.5 - entered[i] for i in leaving})
    def kept(stride):  # takes and leavings a stride keeps
        return sum(i % stride == 0 for i in range(next_id)), sum(i % stride == 0 for i in exact)

    assert max(kept(sample.stride)) <= most
    assert sample.stride == 1 or max(kept(sample.stride // 2)) > most  # it thinned only when over its bound
    assert sorted(sample.processing_seconds().tolist()) == sorted(exact[i] for i in exact if i % sample.stride == 0)


def test_the_demo_reads_only_its_own_run_s_xcoms(tmp_path):
    """A second ``semijoin demo`` in the same home read the first run's last progress record (100%,
    200,000 rows seen) before its own join wrote one: its upstream process then committed its changes
    at once, before the update sensors' first poke, and they waited for a newer version forever.
    The XCom table as Airflow keeps it in SQLite (naive UTC times as text)."""
    import sqlite3

    from airflow_provider_semijoin.demo import DAG_ID, JOIN_TASK, _latest_xcom

    db = tmp_path / "airflow.db"
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("CREATE TABLE xcom (dag_id TEXT, task_id TEXT, key TEXT, value BLOB, timestamp TIMESTAMP)")
        connection.execute("INSERT INTO xcom VALUES (?, ?, 'semijoin_metrics', ?, '2026-12-07 03:14:53.636079')",
                           (DAG_ID, JOIN_TASK, json.dumps({"total_input_rows": 200_000})))
    this_run = datetime(2026, 12, 7, 3, 20, tzinfo=timezone.utc).timestamp()
    assert _latest_xcom(db, "semijoin_metrics", this_run) is None
    assert _latest_xcom(db, "semijoin_metrics", this_run - 3600) == {"total_input_rows": 200_000}
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("INSERT INTO xcom VALUES (?, ?, 'semijoin_metrics', ?, '2026-12-07 03:20:00.000001')",
                           (DAG_ID, JOIN_TASK, json.dumps({"total_input_rows": 3_000})))
    assert _latest_xcom(db, "semijoin_metrics", this_run) == {"total_input_rows": 3_000}
