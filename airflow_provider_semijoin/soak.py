"""``semijoin soak``: the Spark pipeline for N minutes, sampled for slow leaks (issue 13).

A streaming join is meant to run for months; a leak of a few bytes per micro-batch in H_S, the
caches, the retry state, the progress history or the checkpoint folder shows only over time.
The soak runs the Spark pipeline (the built-in generator at a steady rate -> one join step on a
master table -> Parquet sinks) for N minutes of streaming - counted from the end of its first
micro-batch, so a slow start (a cold Python worker, the first plan, a loaded machine) never eats
the soak - while a scheduler installs master-data updates and, optionally,
kills the join's database session (``KILL CONNECTION``, MySQL only) at times drawn from a seed.
Every ``sample_s`` seconds it samples:

* ``rss_driver_bytes`` (this process) and ``rss_tree_bytes`` (with the Spark JVM and its Python
  workers, every descendant process);
* ``structure_bytes``: what the algorithm's structures hold after the latest micro-batch;
* ``checkpoint_bytes``: the size of Spark's checkpoint folder (offsets, commits, retry state);
* ``history_bytes``: the JSON size of the :class:`~.core.progress.ProgressHistory` the Airflow
  operators push to XCom (the same history, fed the same records);
* ``db_connections``: sockets of this process tree open to the master database's port
  (MySQL), or file handles on the SQLite file.

It writes ``soak.csv``, ``soak.png`` (one panel per series) and ``soak.json`` (the summary:
slope of each series after the warm-up, per minute, ``memory_peak_bytes`` - the structures'
peak plus the most bytes the carried rows held - against the budget, and the exactly-once check of the sinks against the generator's tuple ids). Slopes are
reported, not judged: a machine shared with other work moves them.
"""

from __future__ import annotations

import csv
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from .core.checks import check_positive
from .core.errors import ConfigError, SemiJoinError
from .core.progress import ProgressHistory
from .core.stores import DatabaseURL, create_change_tables, install_changes, redact
from .core.stores.sql import MYSQL, check_identifier
from .core.units import parse_bytes

SIZES = {"small": {"master_rows": 20_000, "rate": 500.0}, "standard": {"master_rows": 200_000, "rate": 2_000.0}}
MAX_RESTARTS = 5
SERIES = ("rss_driver_bytes", "rss_tree_bytes", "structure_bytes", "checkpoint_bytes", "history_bytes", "db_connections")
COLUMNS = ("t_s", *SERIES, "history_points", "input_rows", "batches", "updates", "kills")
DEFAULT_MASTER = "mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_bench"


@dataclass
class SoakConfig:
    """What the soak runs; ``update_every_s`` / ``kill_every_s`` None switch those events off."""

    minutes: float
    out: Path
    master: str = DEFAULT_MASTER
    table: str = "soak_master"
    size: str = "small"
    algorithm: str = "hybridjoin"
    memory: str = "8MB"
    rate: float | None = None  # tuples/s (default: the size's)
    update_every_s: float | None = 20.0
    update_keys: int = 50
    kill_every_s: float | None = None
    sample_s: float = 2.0
    warmup_fraction: float = 0.25
    seed: int = 0
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        self.out = Path(self.out)
        for name in ("minutes", "sample_s"):
            value = getattr(self, name)
            check_positive(name, value)
        for name in ("update_every_s", "kill_every_s", "rate"):
            value = getattr(self, name)
            check_positive(name, value, "a positive number (leave it out to switch it off)", optional=True)
        if self.size not in SIZES:
            raise ConfigError(f"size: {self.size!r} is not one of {list(SIZES)}")
        if not 0 <= self.warmup_fraction < 1:
            raise ConfigError(f"warmup_fraction: {self.warmup_fraction!r} is not a fraction in [0, 1)")
        check_identifier(self.table, "table")
        parse_bytes(self.memory)
        url = DatabaseURL.parse(self.master)
        if self.kill_every_s is not None and url.dialect is not MYSQL:
            raise ConfigError(f"kill_every_s: KILL CONNECTION needs a MySQL master; {redact(self.master)!r} is not one")

    @property
    def master_rows(self) -> int:
        return SIZES[self.size]["master_rows"]

    @property
    def rows_per_second(self) -> float:
        return float(self.rate or SIZES[self.size]["rate"])


# -- sampling ---------------------------------------------------------------------------------
def process_tree(root: int) -> list[int]:
    """``root`` and every process descending from it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def rss_bytes(pid: int) -> int:
    """Resident set size of one process (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _socket_inodes_to(port: int) -> set[str]:
    """Inodes of TCP sockets whose remote end is ``port`` (IPv4 and IPv6)."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if int(parts[2].rsplit(":", 1)[1], 16) == port and parts[3] == "01":  # ESTABLISHED
                inodes.add(parts[9])
    return inodes


def open_db_connections(pids: list[int], url: DatabaseURL) -> int:
    """Connections of these processes to the master database: sockets to MySQL's port, or open
    handles on the SQLite file."""
    if url.dialect is MYSQL:
        wanted = {f"socket:[{inode}]" for inode in _socket_inodes_to(url.port)}
    else:
        wanted = {str(Path(url.path).resolve())}
    count = 0
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                count += os.readlink(fd) in wanted
            except OSError:
                continue
    return count


def folder_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
    return total


class Recorder:
    """The soak's state, shared by the progress callback, the scheduler and the sampler."""

    def __init__(self, clock, csv_path: Path):
        self.clock = clock
        self.started = clock()
        self.streaming_since: float | None = None  # the end of the first micro-batch: the soak's minutes count from here
        self.csv_path = csv_path  # written as the samples come: a soak that dies keeps what it saw
        with open(csv_path, "w", newline="") as f:
            csv.DictWriter(f, fieldnames=COLUMNS).writeheader()
        self.lock = threading.Lock()
        self.history = ProgressHistory()
        self.latest: dict = {}
        self.memory_peak = 0
        self.updates = 0
        self.kills = 0
        self.events: list[dict] = []
        self.samples: list[dict] = []
        self.rows_before = 0  # input rows of the query's runs before a restart

    def restarted(self, clock, reason: str) -> None:
        """The query failed and restarts: its counters start at zero again."""
        with self.lock:
            self.rows_before = int(self.latest.get("total_input_rows") or self.rows_before)
        self.event("restart", clock, reason=reason)

    def on_progress(self, record: dict) -> None:
        with self.lock:
            if self.streaming_since is None:
                self.streaming_since = self.clock()
            self.history.append(record)
            self.latest = {**record, "total_input_rows": self.rows_before + int(record.get("total_input_rows") or 0)}
            self.memory_peak = max(self.memory_peak, int(record.get("memory_peak_bytes") or 0))

    def event(self, kind: str, clock, **details) -> None:
        with self.lock:
            if kind == "update":
                self.updates += 1
            elif kind == "kill":
                self.kills += 1
            self.events.append({"t_s": round(clock() - self.started, 3), "kind": kind, **details})

    def sample(self, clock, checkpoint: Path, url: DatabaseURL) -> dict:
        tree = process_tree(os.getpid())
        with self.lock:
            history_bytes = len(json.dumps(self.history.to_dict()))
            row = {
                "t_s": round(clock() - self.started, 3),
                "rss_driver_bytes": rss_bytes(os.getpid()),
                "rss_tree_bytes": sum(rss_bytes(pid) for pid in tree),
                "structure_bytes": int(self.latest.get("memory_bytes") or 0),
                "checkpoint_bytes": folder_bytes(checkpoint),
                "history_bytes": history_bytes,
                "db_connections": open_db_connections(tree, url),
                "history_points": len(self.history),
                "input_rows": int(self.latest.get("total_input_rows") or 0),
                "batches": int(self.latest.get("batch_id", -1)) + 1,
                "updates": self.updates,
                "kills": self.kills,
            }
            self.samples.append(row)
            with open(self.csv_path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=COLUMNS).writerow(row)
        return row


# -- events: master-data updates and KILL CONNECTION -------------------------------------------
def event_times(every_s: float | None, until_s: float, rng: np.random.Generator) -> list[float]:
    """One event in each interval of ``every_s`` seconds, at a random moment of it."""
    if every_s is None:
        return []
    starts = np.arange(every_s * 0.5, until_s, every_s)
    return sorted(float(t) for t in starts + rng.uniform(0, every_s * 0.5, len(starts)) if t < until_s)


def update_batch(config: SoakConfig, rng: np.random.Generator, round_: int) -> pa.Table:
    """Changes to ``update_keys`` random keys of R: new name and price (upserts; R's other
    columns of those rows become NULL, which the join carries as it finds them)."""
    from .workloads.master import master_keys

    keys = rng.choice(master_keys(config.master_rows), size=min(config.update_keys, config.master_rows), replace=False)
    return pa.table({
        "op": pa.array(["U"] * len(keys)),
        "nk": pa.array(keys.astype(np.int64)),
        "name": pa.array([f"updated {round_} #{k}" for k in keys]),
        "price": pa.array(np.round(rng.uniform(1, 100, len(keys)), 2)),
    })


def join_sessions(url: DatabaseURL, monitor) -> list[int]:
    """MariaDB session ids of this process tree's connections to the master (not ``monitor``'s)."""
    mine = {f"socket:[{i}]" for i in _socket_inodes_to(url.port)}
    ports = set()
    for pid in process_tree(os.getpid()):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:  # one by one: the fd listing /proc/self/fd is gone by the time it is read
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link in mine:
                ports.add(link)
    local_ports = set()
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            parts = line.split()
            if f"socket:[{parts[9]}]" in ports:
                local_ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    cursor = monitor.cursor()
    try:
        cursor.execute("SELECT CONNECTION_ID()")
        own = cursor.fetchone()[0]
        cursor.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE DB = %s", (url.database,))
        rows = cursor.fetchall()
    finally:
        cursor.close()
    return [int(i) for i, host in rows if i != own and host and host.rsplit(":", 1)[-1].isdigit()
            and int(host.rsplit(":", 1)[1]) in local_ports]


def run_events(config: SoakConfig, recorder: Recorder, stop: threading.Event, clock) -> None:
    """Updates and kills at their scheduled times, one after the other (never both at once)."""
    rng = np.random.default_rng(config.seed)
    until = config.minutes * 60
    schedule = sorted([(t, "update") for t in event_times(config.update_every_s, until, rng)]
                      + [(t, "kill") for t in event_times(config.kill_every_s, until, rng)])
    url = DatabaseURL.parse(config.master)
    monitor = url.connect() if config.kill_every_s is not None else None
    try:
        for round_, (at, kind) in enumerate(schedule):
            if stop.wait(max(0.0, at - (clock() - recorder.started))):
                return
            if kind == "update":
                installed = install_changes(config.master, config.table, "nk", update_batch(config, rng, round_))
                recorder.event("update", clock, version=installed.version, keys=installed.keys)
            else:
                sessions = join_sessions(url, monitor)
                if sessions:
                    victim = int(rng.choice(sessions))
                    cursor = monitor.cursor()
                    try:
                        cursor.execute(f"KILL CONNECTION {victim}")
                    finally:
                        cursor.close()
                recorder.event("kill", clock, sessions=len(sessions))
    finally:
        if monitor is not None:
            monitor.close()


def run_sampler(config: SoakConfig, recorder: Recorder, stop: threading.Event, clock, checkpoint: Path) -> None:
    url = DatabaseURL.parse(config.master)
    while True:
        recorder.sample(clock, checkpoint, url)
        if stop.wait(config.sample_s):
            return


# -- the run --------------------------------------------------------------------------------------
def job_spec(config: SoakConfig) -> dict:
    out = config.out
    return {
        "name": "semijoin_soak",
        "source": {"kind": "generator", "rows_per_second": config.rows_per_second, "master_rows": config.master_rows,
                   "missing": 0.02, "seed": config.seed, "bursty": True},
        "steps": [{"column": "nk", "master_static": True,  # changed only by the soak's installs
                   "algorithm": config.algorithm, "memory": config.memory, "params": dict(config.params),
                   "master": {"url": config.master, "table": config.table, "key": "nk", "select": ["sk", "name", "price"]}}],
        "sinks": {"matched": {"kind": "parquet", "path": str(out / "matched")},
                  "dead_letter": {"kind": "parquet", "path": str(out / "dead_letter")}},
        "checkpoint": str(out / "checkpoint"),
        "trigger_interval_s": 1.0,  # no stop of its own: :func:`run_restarting` stops it after the minutes of streaming
    }


def check_sinks(out: Path) -> dict:
    """The generator's tuples are 0, 1, 2, ...: every id up to the highest one in the sinks is there
    exactly once (matched xor dead letter); the tail after it had not entered a committed batch."""
    from .spark.sinks import read_parquet_sink

    ids = []
    for name in ("matched", "dead_letter"):
        table = read_parquet_sink(str(out / name))
        ids.append(np.asarray(table["sj_id"].to_pylist() if table.num_rows else [], dtype=np.int64))
    input_rows = int(max((int(i.max()) + 1 for i in ids if len(i)), default=0))
    seen = np.zeros(input_rows, dtype=np.int64)
    outside = sum(int(((i < 0) | (i >= input_rows)).sum()) for i in ids)
    for i in ids:
        np.add.at(seen, i[(i >= 0) & (i < input_rows)], 1)
    lost, duplicated = int((seen == 0).sum()), int((seen > 1).sum())
    return {"ok": lost == 0 and duplicated == 0 and outside == 0, "tuples": input_rows, "lost": lost,
            "duplicated": duplicated, "unknown_ids": outside}


def slopes(samples: list[dict], warmup_s: float) -> dict:
    """Least-squares slope of each series after the warm-up, in its unit per minute."""
    t = np.array([s["t_s"] for s in samples], dtype=float)
    after = t >= warmup_s
    result = {}
    for name in SERIES:
        y = np.array([s[name] for s in samples], dtype=float)
        if after.sum() < 3:
            result[name] = {"per_minute": None, "mean": None}
            continue
        slope = np.polyfit(t[after] / 60.0, y[after], 1)[0]
        result[name] = {"per_minute": round(float(slope), 3), "mean": round(float(y[after].mean()), 1)}
    return result


def write_plot(path: Path, samples: list[dict], warmup_s: float, events: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([s["t_s"] for s in samples]) / 60.0
    fig, axes = plt.subplots(3, 2, figsize=(12, 9), sharex=True)
    for ax, name in zip(axes.flat, SERIES):
        y = np.array([s[name] for s in samples], dtype=float)
        scale, unit = (2**20, "MiB") if name.endswith("_bytes") else (1, "")
        ax.plot(t, y / scale, lw=1)
        ax.axvline(warmup_s / 60.0, color="grey", ls="--", lw=0.8)
        for e in events:
            color = {"kill": "red", "update": "green"}.get(e["kind"], "black")
            ax.axvline(e["t_s"] / 60.0, color=color, alpha=0.35 if color != "black" else 0.7, lw=0.7)
        ax.set_title(f"{name} ({unit})" if unit else name, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title + "  (dashed: end of warm-up; green: updates, red: KILL CONNECTION, black: restarts)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def prepare_master(config: SoakConfig) -> None:
    from .workloads import generate_master

    generate_master(config.master, config.table, config.master_rows, seed=config.seed)
    create_change_tables(config.master, config.table, "nk")


def run_soak(config: SoakConfig, *, spark=None, out=print, clock=time.time) -> dict:
    """Run the soak; returns (and writes to ``soak.json``) its summary."""
    from .spark.session import get_spark
    from .job.spec import JobSpec

    config.out.mkdir(parents=True, exist_ok=True)
    prepare_master(config)
    spec = JobSpec.from_dict(job_spec(config))
    spark = spark or get_spark()  # before the clock starts: a cold session takes a while
    recorder = Recorder(clock, config.out / "soak.csv")
    stop = threading.Event()
    threads = [
        threading.Thread(target=run_sampler, args=(config, recorder, stop, clock, Path(spec.checkpoint)), daemon=True),
        threading.Thread(target=run_events, args=(config, recorder, stop, clock), daemon=True),
    ]
    for thread in threads:
        thread.start()
    out(f"soak: {config.minutes} min of {config.algorithm} on {redact(config.master)} table {config.table} "
        f"({config.master_rows} rows, {config.rows_per_second:g} tuples/s), writing to {config.out}")
    try:
        summary = run_restarting(spec, spark, recorder, clock, config.minutes * 60, out)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    recorder.sample(clock, Path(spec.checkpoint), DatabaseURL.parse(config.master))
    return report(config, spec, recorder, summary, out)


def streamed_s(recorder: Recorder, clock) -> float:
    """Seconds of streaming so far: since the end of the first micro-batch (0 before it)."""
    return 0.0 if recorder.streaming_since is None else clock() - recorder.streaming_since


def stop_after_streaming(recorder: Recorder, clock, duration_s: float, stop: threading.Event,
                         ended: threading.Event) -> None:
    """Sets ``stop`` once the job has streamed ``duration_s`` (the soak's minutes)."""
    while not ended.wait(0.2):
        if streamed_s(recorder, clock) >= duration_s:
            stop.set()
            return


def run_restarting(spec, spark, recorder: Recorder, clock, duration_s: float, out) -> dict:
    """``run_job`` until it has streamed ``duration_s`` (:func:`streamed_s`); a query that fails (a
    Python worker that did not connect back in time on a busy machine, a fault past the reconnect
    bound) is restarted from its checkpoint, as the Airflow task's retry would: at most
    MAX_RESTARTS times."""
    totals = {"batches": 0, "input_rows": 0, "matched": 0, "unmatched": 0, "restarts": 0}
    stop, ended = threading.Event(), threading.Event()
    timer = threading.Thread(target=stop_after_streaming, args=(recorder, clock, duration_s, stop, ended), daemon=True)
    timer.start()
    try:
        return _run_until_stopped(spec, spark, recorder, clock, duration_s, out, stop, totals)
    finally:
        ended.set()
        timer.join(timeout=10)


def _run_until_stopped(spec, spark, recorder: Recorder, clock, duration_s: float, out, stop: threading.Event,
                       totals: dict) -> dict:
    from .spark.runner import run_job

    while True:
        try:
            summary = run_job(spec, spark=spark, on_progress=recorder.on_progress, stop_event=stop)
        except Exception as exc:  # noqa: BLE001 - pyspark's StreamingQueryException or run_job's RuntimeError
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            recorder.restarted(clock, reason)
            out(f"soak: the query failed ({reason}); restarting from the checkpoint")
            if totals["restarts"] >= MAX_RESTARTS or streamed_s(recorder, clock) > duration_s - 5:
                raise SemiJoinError(f"soak: the query failed {totals['restarts'] + 1} times; the last time: {reason}") from None
            totals["restarts"] += 1
            continue
        for name in ("batches", "input_rows", "matched", "unmatched"):
            totals[name] += summary[name]
        return {**summary, **totals}


def report(config: SoakConfig, spec, recorder: Recorder, summary: dict, out) -> dict:
    warmup_s = config.minutes * 60 * config.warmup_fraction
    csv_path, png_path = config.out / "soak.csv", config.out / "soak.png"
    title = f"semijoin soak: {config.algorithm}, {config.size}, {config.minutes:g} min, seed {config.seed}"
    write_plot(png_path, recorder.samples, warmup_s, recorder.events, title)
    budget = spec.steps[0].memory_bytes
    result = {
        "config": {**asdict(config), "out": str(config.out), "master": redact(config.master)},
        "csv": str(csv_path),
        "png": str(png_path),
        "samples": len(recorder.samples),
        "warmup_s": warmup_s,
        "slopes_per_minute": slopes(recorder.samples, warmup_s),
        "memory_peak_bytes": recorder.memory_peak,
        "memory_budget_bytes": budget,
        "within_budget": recorder.memory_peak <= budget,
        "updates": recorder.updates,
        "kills": recorder.kills,
        "events": recorder.events,
        "exactly_once": check_sinks(config.out),
        "restarts": summary["restarts"],
        "job": {k: v for k, v in summary.items() if k != "last_progress"},
    }
    (config.out / "soak.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    for line in format_report(result):
        out(line)
    return result


def format_report(result: dict) -> list[str]:
    lines = [f"{'series':<18} {'mean after warm-up':>20} {'slope per minute':>18}"]
    for name, s in result["slopes_per_minute"].items():
        mean = "-" if s["mean"] is None else f"{s['mean']:,.0f}"
        slope = "-" if s["per_minute"] is None else f"{s['per_minute']:+,.1f}"
        lines.append(f"{name:<18} {mean:>20} {slope:>18}")
    e = result["exactly_once"]
    lines += [
        f"memory_peak_bytes {result['memory_peak_bytes']:,} (structures + carried rows) of a budget of "
        f"{result['memory_budget_bytes']:,} ({'within' if result['within_budget'] else 'OVER'})",
        f"{result['job']['input_rows']:,} tuples in {result['job']['batches']} micro-batches, {result['updates']} updates, "
        f"{result['kills']} KILL CONNECTION, {result['restarts']} restarts; exactly once: {'yes' if e['ok'] else 'NO'} (lost {e['lost']}, duplicated {e['duplicated']})",
        f"wrote {result['csv']}, {result['png']}",
    ]
    return lines
