"""The ``semijoin`` command line: generate, join, changes (:mod:`.cli_changes`), algorithms, bench, soak, demo.

Names and options of ``join`` are a stable interface other tools drive. Bad input ends with
one line ``semijoin: error: ...`` naming the problem and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from .core.errors import ConfigError, SemiJoinError, shown
from .core.stores.sql import PASSWORD_ENV
from .core.units import parse_bytes
from .cli_changes import add_changes

DEFAULT_MEMORY = "50MB"


def with_env_password(url):
    """A MySQL URL without a password gets ``$SEMIJOIN_DB_PASSWORD``: a password on the command
    line is visible to every user of the machine (``ps``), one in the environment is not."""
    secret = os.environ.get(PASSWORD_ENV)
    if not secret or not isinstance(url, str) or not url.lower().startswith(("mysql://", "mysql+mysqldb://", "mariadb://")):
        return url
    parts = urlsplit(url)
    if parts.password is not None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user or 'root'}:{quote(secret, safe='')}@{host}"))


def _params(pairs: list[str]) -> dict:
    params = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ConfigError(f"--set: {pair!r} is not NAME=VALUE")
        params[name.strip()] = value.strip()
    return params


def _columns(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


def _print_json(data, path: str | None, what: str = "stats") -> None:
    text = json.dumps(data, indent=2, default=str)
    if not path:
        print(text)
        return
    try:
        Path(path).write_text(text + "\n")
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write {shown(path)} ({exc.strerror or exc})") from None


def _check_writable(path: str | None, what: str) -> None:
    """A file the run will write: its folder must exist (checked before any work)."""
    if not path:
        return
    try:
        folder_ok = Path(path).parent.is_dir() and not Path(path).is_dir()
    except OSError as exc:  # a name too long for the file system
        raise ConfigError(f"{what}: {shown(path)} is not a file name here ({exc.strerror or exc})") from None
    if not folder_ok:
        raise ConfigError(f"{what}: {shown(path)} is not a file in an existing folder")


# -- generate ---------------------------------------------------------------------------------
def cmd_generate_master(args) -> int:
    from .workloads import generate_master

    info = generate_master(args.db, args.table, args.rows, key_type=args.key_type, seed=args.seed, reuse=not args.replace)
    verb = "kept" if info["reused"] else "wrote"
    print(f"{verb} {info['n_rows']} rows ({info['key_type']} keys) in table {info['table']}")
    return 0


def cmd_generate_stream(args) -> int:
    import pyarrow as pa

    from .core.files import write_table
    from .workloads import bursty_arrivals, zipf_stream
    from .workloads.zipf import check_in_memory

    check_in_memory(args.rows, "--rows", "tuples of one table")
    check_in_memory(args.master_rows, "--master-rows", "keys of R")
    stream = zipf_stream(
        args.rows, args.master_rows, exponent=args.zipf, shape=args.shape, missing=args.missing,
        key_type=args.key_type, seed=args.seed,
    )
    if args.rate:
        stream = stream.append_column("arrival_s", pa.array(bursty_arrivals(args.rows, mean_rate=args.rate, seed=args.seed)))
    write_table(args.out, stream, what="out")
    print(f"wrote {stream.num_rows} stream tuples (Zipf {args.zipf}, {args.shape}, missing {args.missing}) to {args.out}")
    return 0


# -- join ---------------------------------------------------------------------------------------
def cmd_join(args) -> int:
    from .core.files import file_format, read_table, write_table
    from .core.joins import algorithm_class, create
    from .core.runner import run_join
    from .core.stores import open_store
    from .core.stores.reconnect import check_retry_max_s

    memory = parse_bytes(args.memory)
    retry_max_s = check_retry_max_s(args.db_retry_max_s, "--db-retry-max-s")
    params = _params(args.set)
    algorithm_class(args.algorithm)  # a wrong name fails before any connection is made
    as_of = _as_of(args.as_of, args.stream_key, args.key, args.algorithm, params)
    select = _columns(args.select)
    for path, what in ((args.out, "out"), (args.unmatched, "unmatched")):
        if path:
            file_format(path, what=what)
    _check_writable(args.stats, "stats")
    stream = read_table(args.stream, what="stream")
    if stream.num_rows == 0:
        raise ConfigError(f"stream: {args.stream!r} has no rows; expected at least one stream tuple")
    read = select if as_of is None else as_of.read_columns(select)
    if as_of is not None:  # the columns it names are there: one sentence before any work
        with open_store(args.master, args.table, args.key, select, retry_max_s=retry_max_s) as store:
            _check_as_of_columns(as_of, store, stream)
    with open_store(args.master, args.table, args.key, read, retry_max_s=retry_max_s) as store:
        algorithm = create(args.algorithm, store, memory, params)
        result = run_join(algorithm, stream, args.stream_key, as_of=None if as_of is None else as_of.lookup)
    matched = result.matched.drop_columns([c for c in read or [] if c not in select])  # version columns read for the lookup
    write_table(args.out, matched, what="out")
    if args.unmatched:
        write_table(args.unmatched, result.unmatched, what="unmatched")
    stats = result.stats
    if args.stats:
        _print_json(stats, args.stats)
    print(
        f"{stats['algorithm']}: {stats['tuples_in']} tuples in, {stats['tuples_matched']} matched, "
        f"{stats['tuples_unmatched']} unmatched {stats['unmatched_by_reason']}, "
        f"{stats['service_rate_tps']:,.0f} tuples/s, {stats['disk_queries']} disk queries, "
        f"exactly once: {'yes' if stats['exactly_once']['ok'] else 'NO'}"
    )
    return 0 if stats["exactly_once"]["ok"] else 1


def _as_of(text: str | None, stream_key: str, key: str, algorithm: str, params: dict):
    """``--as-of EVENT_TIME,VALID_FROM,VALID_TO`` as the job spec's ``as_of`` (checked by the
    same code), or None."""
    from .job.spec import AsOfSpec

    if text is None:
        return None
    names = [c.strip() for c in text.split(",")]
    if len(names) != 3 or not all(names):
        raise ConfigError(f"--as-of: {text!r} is not EVENT_TIME,VALID_FROM,VALID_TO (the stream's event-time column "
                          "and R's two version columns, comma separated)")
    try:
        as_of = AsOfSpec(*names)
        as_of.check_join(stream_key, key, algorithm, params)
    except ConfigError as exc:
        raise ConfigError(f"--as-of: {exc}") from None
    return as_of


def _check_as_of_columns(as_of, store, stream) -> None:
    from .core.asof import check_lookup

    try:
        check_lookup(as_of.lookup, {c.name: c.arrow_type for c in store.columns}, store.table, stream.schema)
    except ConfigError as exc:
        raise ConfigError(f"--as-of: {exc}") from None


# -- algorithms ---------------------------------------------------------------------------------
def cmd_algorithms(args) -> int:
    from .core.joins import describe

    table = describe()
    if args.json:
        _print_json(table, None)
        return 0
    for entry in table:
        print(f"{entry['name']:<15} {entry['paper']}")
        for name, p in entry["params"].items():
            print(f"    --set {name}=<{p['type']}>  (default {p['default']}): {p['doc']}")
    return 0


# -- bench / demo ---------------------------------------------------------------------------------
def cmd_bench(args) -> int:
    from .bench.steady import BenchConfig
    from .bench.suite import run_bench

    if args.spark:
        return cmd_bench_spark(args)
    if args.changes:
        return cmd_bench_changes(args)
    if args.cold:
        return cmd_bench_cold(args)
    modes = {"--micro": (args.micro, cmd_bench_micro), "--access": (args.access, cmd_bench_access),
             "--as-of": (args.as_of, cmd_bench_as_of)}
    for option, (chosen, command) in modes.items():
        if chosen:
            if args.set:  # a setting would be lost without a word
                raise ConfigError(f"--set: {option} takes no algorithm parameters; "
                                  "expected no --set (the steady-state, cold and Spark benches take them)")
            return command(args)
    config = BenchConfig(
        master=args.master, rows=args.rows, memory=parse_bytes(args.memory), zipf=args.zipf,
        shapes=_columns(args.shapes), algorithms=_columns(args.algorithms), warmup_s=args.warmup,
        warmup_turnovers=args.warmup_turnovers, warmup_max_s=max(args.warmup_max, args.warmup),
        window_s=args.window, params=_params(args.set), seed=args.seed,
        sweep_cache=_shares(args.sweep_cache), io_samples=args.io_samples,
        temporal_interval=args.temporal_interval, temporal_fraction=args.temporal_fraction,
        ssij_policies=args.ssij_policies, sweep_max_scan=_whole_numbers(args.sweep_max_scan, "--sweep-max-scan"),
        dbms_join=args.dbms_join, dbms_chunk=args.dbms_chunk,
    )
    report = run_bench(config, out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    return 0 if all(r["memory_ok"] for r in report["results"]) else 1


def _write_report(report: dict, path: str | None) -> None:
    """A benchmark's report as JSON at ``path`` (``--out``), if one was given."""
    if path:
        _print_json(report, path)
        print(f"wrote {path}")


def cmd_bench_cold(args) -> int:
    from .bench.cold import ColdConfig, run_cold

    config = ColdConfig(
        master=args.master, rows=args.rows, stream_rows=args.stream_rows, memory=parse_bytes(args.memory),
        zipf=args.zipf, shapes=_columns(args.shapes), algorithms=_columns(args.algorithms), seed=args.seed,
        params=_params(args.set),
    )
    report = run_cold(config, out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    return 0 if all(r["exactly_once"] for r in report["results"]) else 1


def cmd_bench_micro(args) -> int:
    from .bench.micro import MicroConfig, run_micro

    batches = _whole_numbers(args.micro_batches, "--micro-batches")
    config = MicroConfig(cache_keys=args.cache_keys, batches=batches, zipf=args.zipf, seed=args.seed)
    report = run_micro(config, out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    return 0


def cmd_bench_access(args) -> int:
    from .bench.access import AccessConfig, run_access

    report = run_access(AccessConfig(master=args.master, rows=args.rows, seed=args.seed),
                        out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    return 0


def cmd_bench_as_of(args) -> int:
    from .bench.asof import DEFAULT_ALGORITHMS, AsOfBenchConfig, run_asof_bench

    config = AsOfBenchConfig(master=args.master, rows=args.rows, stream_rows=args.stream_rows,
                             batch_rows=args.as_of_batch_rows, memory=parse_bytes(args.memory), zipf=args.zipf,
                             algorithms=_columns(args.algorithms) or list(DEFAULT_ALGORITHMS), seed=args.seed)
    report = run_asof_bench(config, out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    memory_ok = all(r["memory_ok"] for r in report["results"] if "memory_ok" in r)
    return 0 if memory_ok and all(report["same_as_sql"].values()) else 1


def cmd_bench_spark(args) -> int:
    from .bench.spark_paths import SparkBenchConfig
    from .bench.spark_pipeline import run_spark_bench
    from .bench.steady import BenchConfig

    config = SparkBenchConfig(
        BenchConfig(master=args.master, rows=args.rows, memory=parse_bytes(args.memory), zipf=args.zipf,
                    shapes=_columns(args.shapes) or ["noperm"], warmup_s=args.warmup, window_s=args.window,
                    params=_params(args.set), seed=args.seed),
        algorithms=_columns(args.algorithms), batch_rows=args.spark_batch_rows, latency_rate=args.spark_rate,
        trigger_s=args.spark_trigger, latency_max_queue_s=args.spark_max_queue_time,
    )
    report = run_spark_bench(config, out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    return 0 if all(r["exactly_once"]["ok"] for shape in report["shapes"] for r in shape["rows"]) else 1


def cmd_bench_changes(args) -> int:
    from .bench.changes import ChangesBenchConfig, healthy, run_changes_bench
    from .bench.spark_paths import SparkBenchConfig
    from .bench.steady import BenchConfig

    rates = [_number(text, "--change-rates") for text in _columns(args.change_rates) or []]
    config = ChangesBenchConfig(
        SparkBenchConfig(BenchConfig(master=args.master, rows=args.rows, memory=parse_bytes(args.memory), zipf=args.zipf,
                                     shapes=_columns(args.shapes) or ["noperm"], warmup_s=args.warmup,
                                     window_s=args.window, params=_params(args.set), seed=args.seed),
                         algorithms=_columns(args.algorithms), batch_rows=args.spark_batch_rows),
        rates=rates, txn_rows=args.change_txn_rows, work_ahead=not args.change_no_work_ahead,
    )
    report = run_changes_bench(config, out=functools.partial(print, flush=True))
    _write_report(report, args.out)
    return 0 if healthy(report) else 1


def _number(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{option}: {text!r} is not a number") from None


def cmd_reproduce(args) -> int:
    from .bench.reproduce import rewrite_report, run_reproduce

    if args.report_only:
        summary = rewrite_report(args.out)
    else:
        master = args.master or f"sqlite:///{Path(args.out).resolve() / 'master.db'}"
        summary = run_reproduce(master, args.scale, args.out, seed=args.seed, out=functools.partial(print, flush=True),
                                experiments=_columns(args.experiments) or None)
    counts = {v: sum(c["verdict"] == v for c in summary["claims"]) for v in ("reproduced", "not reproduced", "not measured")}
    print(", ".join(f"{n} {v}" for v, n in counts.items()) + f" of {len(summary['claims'])} claims")
    return 0


def _shares(text: str | None) -> list[float] | None:
    shares = []
    for i, item in enumerate(_columns(text) or []):
        try:
            shares.append(float(item))
        except ValueError:
            raise ConfigError(f"--sweep-cache[{i}]: {item!r} is not a number (expected shares of the memory such as 0.05)") from None
    return shares or None


def _whole_numbers(text: str | None, option: str) -> list[int] | None:
    values = []
    for i, item in enumerate(_columns(text) or []):
        try:
            values.append(int(item))
        except ValueError:
            raise ConfigError(f"{option}[{i}]: {item!r} is not a whole number") from None
    return values or None


def cmd_soak(args) -> int:
    from .soak import SoakConfig, run_soak

    config = SoakConfig(
        minutes=args.minutes, out=Path(args.out), master=args.master, table=args.table, size=args.size,
        algorithm=args.algorithm, memory=args.memory, rate=args.rate, update_every_s=args.update_every or None,
        update_keys=args.update_keys, kill_every_s=args.kill_every or None, sample_s=args.sample, seed=args.seed,
        params=_params(args.set),
    )
    result = run_soak(config, out=functools.partial(print, flush=True))
    return 0 if result["exactly_once"]["ok"] and result["within_budget"] else 1


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(Path(args.dir), stream_rows=args.stream_rows, product_rows=args.product_rows,
                    customer_rows=args.customer_rows, rows_per_second=args.rate, ui_port=args.ui_port,
                    source=args.source, out=functools.partial(print, flush=True))


# -- parser -------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse's errors as the command's own: one line ``semijoin: error: ...``, exit status 2
    (argparse prints the usage first and names the subcommand its own way)."""

    def error(self, message: str):
        message = " ".join(message.split())
        self.exit(2, f"semijoin: error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="semijoin", description="Semi-stream joins of a stream with a disk-based master table.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_join(sub)
    add_changes(sub)
    _add_algorithms(sub)
    _add_bench(sub)
    _add_reproduce(sub)
    _add_soak(sub)
    _add_demo(sub)
    return parser


def _add_generate(sub) -> None:
    """``semijoin generate master|stream``: the papers' master table R and Zipf streams."""
    gen = sub.add_parser("generate", help="generate a master table or a stream file").add_subparsers(dest="what", required=True)
    gm = gen.add_parser("master", help="write a master table R into a database")
    gm.add_argument("--db", required=True, help="sqlite:///path.db or mysql://user:pass@host:port/db")
    gm.add_argument("--table", default="master")
    gm.add_argument("--rows", type=int, required=True)
    gm.add_argument("--key-type", choices=["int", "str"], default="int")
    gm.add_argument("--seed", type=int, default=0)
    gm.add_argument("--replace", action="store_true", help="rewrite the table even if it already holds this data set")
    gm.set_defaults(func=cmd_generate_master)
    gs = gen.add_parser("stream", help="write a Zipf-skewed stream file (Parquet, CSV or JSON lines)")
    gs.add_argument("--out", required=True)
    gs.add_argument("--rows", type=int, required=True)
    gs.add_argument("--master-rows", type=int, required=True, help="rows of the master table the stream joins")
    gs.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent (0 = uniform)")
    gs.add_argument("--shape", choices=["noperm", "random"], default="noperm")
    gs.add_argument("--missing", type=float, default=0.0, help="fraction of tuples whose key is absent from R")
    gs.add_argument("--key-type", choices=["int", "str"], default="int")
    gs.add_argument("--seed", type=int, default=0)
    gs.add_argument("--rate", type=float, default=None, help="add bursty self-similar arrival times at this mean rate (tuples/s)")
    gs.set_defaults(func=cmd_generate_stream)


def _add_join(sub) -> None:
    """``semijoin join``: a stream file joined with a master table."""
    j = sub.add_parser("join", help="join a stream file with a master table")
    j.add_argument("--algorithm", required=True, help="see `semijoin algorithms`")
    j.add_argument("--master", required=True, help="sqlite:///path.db or mysql://user:pass@host:port/db")
    j.add_argument("--table", required=True)
    j.add_argument("--key", required=True, help="join key column of the master table")
    j.add_argument("--select", help="master columns to add, comma separated (default: all but the key)")
    j.add_argument("--stream", required=True, help="stream file: .parquet, .csv or .jsonl")
    j.add_argument("--stream-key", required=True)
    j.add_argument("--out", required=True, help="matched rows (stream columns + master columns)")
    j.add_argument("--unmatched", help="unmatched rows with their reason")
    j.add_argument("--memory", default=DEFAULT_MEMORY, help=f"memory budget (default {DEFAULT_MEMORY})")
    j.add_argument("--set", action="append", metavar="NAME=VALUE", help="algorithm parameter (repeatable)")
    j.add_argument("--stats", help="write run statistics as JSON to this file")
    j.add_argument("--as-of", metavar="EVENT_TIME,VALID_FROM,VALID_TO",
                   help="R is a type-2 dimension: each tuple gets the version of its key valid at its EVENT_TIME "
                        "(a stream column), R's rows valid over [VALID_FROM, VALID_TO), VALID_TO NULL for the current "
                        "one; a tuple with none leaves unmatched, no_version_valid")
    j.add_argument("--db-retry-max-s", default=120.0, metavar="SECONDS",
                   help="how long to reconnect to a lost MySQL server before failing (default 120)")
    j.set_defaults(func=cmd_join)


def _add_algorithms(sub) -> None:
    """``semijoin algorithms``: the registry's algorithms and parameters."""
    a = sub.add_parser("algorithms", help="list the join algorithms and their parameters")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_algorithms)


def _add_bench(sub) -> None:
    """``semijoin bench``: the steady state, and one of --cold, --micro, --access, --as-of, --spark."""
    b = sub.add_parser("bench", help="service rate of every algorithm on the same data, in one run")
    b.add_argument("--master", default="mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_bench")
    b.add_argument("--rows", type=int, default=2_000_000)
    b.add_argument("--memory", default=DEFAULT_MEMORY)
    b.add_argument("--zipf", type=float, default=1.0)
    b.add_argument("--shapes", default=None,
                   help="stream shapes, comma separated: noperm, random (Zipf over R) and temporal (SSIJ's temporal "
                        "locality); default noperm,random, with --spark noperm")
    b.add_argument("--algorithms", default=None,
                   help="comma separated (default: all); NAME@LABEL runs NAME again as a variant with the --set of "
                        "NAME@LABEL on top of NAME's, e.g. --algorithms hybridjoin-pq,hybridjoin-pq@sqrt "
                        "--set hybridjoin-pq@sqrt.threshold_rule=sqrt")
    b.add_argument("--warmup", type=float, default=10.0, help="seconds before the measurement window")
    b.add_argument("--window", type=float, default=20.0, help="seconds of the measurement window")
    b.add_argument("--warmup-turnovers", type=float, default=2.0,
                   help="the warm-up also lasts until the tuples an algorithm holds (H_S) turned over this often "
                        "(default 2: a cache front-stage's H_R learns as they do); 0: --warmup alone")
    b.add_argument("--warmup-max", type=float, default=120.0, help="seconds the warm-up lasts at most")
    b.add_argument("--set", action="append", metavar="ALGORITHM.NAME=VALUE", help="algorithm parameter (repeatable)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--sweep-cache", metavar="SHARES",
                   help="also measure and predict each cache algorithm with H_R at these shares of the memory, "
                        "e.g. 0.01,0.05,0.1,0.2,0.4, and report the empirical and the model's optimum")
    b.add_argument("--io-samples", type=int, default=8,
                   help="predict with S and T fitted to this many loads of each of three sizes at random places "
                        "of R (default 8); 0: the store's own calibration, which the algorithms size themselves with")
    b.add_argument("--temporal-interval", type=int, default=1_000_000,
                   help="tuples per interval of the temporal shape (default 1000000)")
    b.add_argument("--temporal-fraction", type=float, default=0.05,
                   help="share of R's keys one interval of the temporal shape draws from (default 0.05)")
    b.add_argument("--ssij-policies", action="store_true",
                   help="also measure SSIJ's page-cache policy against LRU (SSIJ Figure 11)")
    b.add_argument("--sweep-max-scan", metavar="PAGES",
                   help="also measure SSIJ at these maxScan values, e.g. 1,10,50,200,1000 (SSIJ Figure 15)")
    b.add_argument("--dbms-join", action="store_true",
                   help="also measure MySQL's own index join of an in-memory stream chunk with R (SSIJ Figure 9)")
    b.add_argument("--dbms-chunk", type=int, default=1_000_000, help="stream tuples of that chunk (default 1000000)")
    modes = b.add_mutually_exclusive_group()  # one benchmark a run
    modes.add_argument("--cold", action="store_true",
                       help="time a whole `semijoin join` (a fresh process, start-up included) of a short stream file "
                            "for every algorithm and the inlist / inlist-lru baselines, by wall clock")
    b.add_argument("--stream-rows", type=int, default=400_000,
                   help="with --cold: tuples of the stream file; with --as-of: of the stream (default 400000)")
    modes.add_argument("--micro", action="store_true",
                       help="time the cache-hit path alone (H_R probe + take, CACHEJOIN's front stage) on one core, no "
                            "database, against a pandas hash index and Arrow's hash join")
    b.add_argument("--cache-keys", type=int, default=200_000, help="with --micro: keys in H_R (default 200000)")
    b.add_argument("--micro-batches", default="10000,100000,1000000",
                   help="with --micro: stream batch sizes (default 10000,100000,1000000)")
    modes.add_argument("--access", action="store_true",
                       help="time what each kind of access to the bench's R (bench_r<rows> on --master) costs: "
                            "2000 point queries, 40 range reads of 8192-row pages, IN lists of 1000-10000 keys, a "
                            "full scan; with MySQL/MariaDB, whether R fits in the server's buffer pool (uses "
                            "--master, --rows, --seed, --out)")
    modes.add_argument("--as-of", action="store_true",
                       help="as-of lookups on a type-2 R (asof_r<rows>_s<seed>: about rows/3 keys of 1-5 versions): "
                            "hybridjoin and cachejoin (or --algorithms) as of the event time against the same with "
                            "equality, against one SQL join a micro-batch and against an IN list of its keys a micro-batch "
                            "picked in pandas; checks the as-of, SQL and IN-list results agree")
    b.add_argument("--as-of-batch-rows", type=int, default=10_000,
                   help="with --as-of: tuples a micro-batch (default 10000)")
    b.add_argument("--out", help="write the report as JSON")
    modes.add_argument("--spark", action="store_true",
                       help="measure the Spark pipeline (HYBRIDJOIN and the best cache algorithm, or --algorithms) against "
                            "the core engine alone and Spark's own stream-static join")
    b.add_argument("--spark-batch-rows", type=int, default=1_000_000,
                   help="with --spark: tuples per micro-batch of the throughput runs (default about one H_S of HYBRIDJOIN at 50 MB)")
    b.add_argument("--spark-rate", type=float, default=None,
                   help="with --spark: tuples/s offered in the latency runs (default: half the slowest Spark path's throughput)")
    b.add_argument("--spark-trigger", type=float, default=0.5,
                   help="with --spark: the trigger interval of the latency runs, seconds (default 0.5)")
    b.add_argument("--spark-max-queue-time", type=float, default=None,
                   help="with --spark: the steps' max_queue_time_s in the latency runs, the longest a tuple waits "
                        "inside the join (default: the step's default)")
    modes.add_argument("--changes", action="store_true",
                       help="measure the Spark pipeline (hybridjoin, cachejoin-pq, ssij, or --algorithms) on an R that "
                            "another connection changes by plain SQL at --change-rates rows/s, its writes captured: "
                            "throughput, staleness, exactly once")
    b.add_argument("--change-rates", default="0,100,1000", help="with --changes: changed rows/s, comma separated")
    b.add_argument("--change-txn-rows", type=int, default=10, help="with --changes: rows a writer transaction changes")
    b.add_argument("--change-no-work-ahead", action="store_true",
                   help="with --changes: the join idle between micro-batches (work_ahead: false)")
    b.set_defaults(func=cmd_bench)


def _add_reproduce(sub) -> None:
    """``semijoin reproduce``: the papers' experiments, a report with plots and a verdict per claim."""
    r = sub.add_parser("reproduce", help="run the papers' experiments on this machine; a report with plots and "
                                         "a verdict per claim")
    r.add_argument("--scale", choices=["small", "standard"], default="small",
                   help="small: R = 40,000 rows, a few minutes; standard: R = 2M rows as the papers (about an hour)")
    r.add_argument("--out", default="report", help="folder for README.md, the PNG plots and results.json")
    r.add_argument("--master", default=None, help="database for R (default: sqlite:///<out>/master.db)")
    r.add_argument("--experiments", default=None, help="comma-separated subset of: skew, memory, pq_vs_l, ssij, "
                                                      "policy, max_scan, temporal, dbms, model (default: all)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--report-only", action="store_true",
                   help="measure nothing: write README.md and the plots again from --out's results.json")
    r.set_defaults(func=cmd_reproduce)


def _add_soak(sub) -> None:
    """``semijoin soak``: the Spark pipeline for N minutes with updates and faults."""
    s = sub.add_parser("soak", help="run the Spark pipeline for N minutes with updates and faults; sample RSS, "
                                    "structure bytes, checkpoint, history and connections; CSV + PNG + slopes")
    s.add_argument("--minutes", type=float, required=True, help="minutes of streaming, from the end of the first micro-batch")
    s.add_argument("--out", default="soak", help="folder for soak.csv, soak.png, soak.json, the sinks and the checkpoint")
    s.add_argument("--master", default="mysql://semijoin:semijoin@127.0.0.1:3306/semijoin_bench")
    s.add_argument("--table", default="soak_master", help="master table the soak (re)generates")
    s.add_argument("--size", choices=["small", "standard"], default="small",
                   help="small: 20,000 master rows at 500 tuples/s; standard: 200,000 rows at 2,000 tuples/s")
    s.add_argument("--algorithm", default="hybridjoin")
    s.add_argument("--memory", default="8MB")
    s.add_argument("--rate", type=float, default=None, help="tuples/s (default: the size's)")
    s.add_argument("--update-every", type=float, default=20.0, help="seconds between master-data updates (0: none)")
    s.add_argument("--update-keys", type=int, default=50, help="keys changed by one update")
    s.add_argument("--kill-every", type=float, default=0.0,
                   help="seconds between KILL CONNECTION of the join's session (MySQL; 0: none)")
    s.add_argument("--sample", type=float, default=2.0, help="seconds between samples")
    s.add_argument("--seed", type=int, default=0, help="seed of the stream and of the event schedule")
    s.add_argument("--set", action="append", metavar="NAME=VALUE", help="algorithm parameter (repeatable)")
    s.set_defaults(func=cmd_soak)


def _add_demo(sub) -> None:
    """``semijoin demo``: the main job, the reference pipeline as an Airflow DAG run."""
    d = sub.add_parser("demo", help="the main job: the reference pipeline (dags/) as an Airflow DAG run on embedded defaults")
    d.add_argument("--dir", default=".semijoin-home", help="AIRFLOW_HOME of the run (metadata DB, DAGs, warehouse)")
    d.add_argument("--stream-rows", type=int, default=200_000, help="sales in the stream")
    d.add_argument("--product-rows", type=int, default=200_000, help="rows of dim_product")
    d.add_argument("--customer-rows", type=int, default=50_000, help="customers of dim_customer (type 2: a tenth of them with 2 or 3 versions)")
    d.add_argument("--rate", type=float, default=4000, help="sales per second the stream delivers")
    d.add_argument("--source", choices=["generator", "redis"], default="generator",
                   help="where the sales come from: the built-in generator, or a Redis stream on 127.0.0.1:6379 fed at --rate")
    d.add_argument("--ui-port", type=int, default=8080,
                   help="port of the UI command printed at the end (another free one if it is taken)")
    d.set_defaults(func=cmd_demo)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("master", "db"):
        if hasattr(args, name):
            setattr(args, name, with_env_password(getattr(args, name)))
    try:
        return args.func(args)
    except SemiJoinError as exc:
        print(f"semijoin: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("semijoin: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
