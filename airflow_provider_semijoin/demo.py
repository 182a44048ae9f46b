"""``semijoin demo``: the main job - the reference pipeline as an Airflow DAG run, on embedded defaults.

Everything lives in one folder (default ``./.semijoin-home``), the run's ``AIRFLOW_HOME``:

* ``airflow.cfg`` and ``airflow.db``: Airflow with a SQLite metadata database, the LocalExecutor
  (the join, the deadline monitor and the update sensors run side by side) and local Spark;
* ``dags/``: the reference pipeline of the repository's ``dags/`` (its YAML spec, with the stream
  and dimension sizes of this run), turned into the DAG ``semijoin_sales_facts`` by the factory;
* ``semijoin/master.db``: the embedded warehouse (:mod:`.demo_warehouse`): ``dim_product``, the
  type-2 ``dim_customer`` and the fact table ``fact_sales``.

The run: an API server (the Execution API the task processes talk to) starts, then
``dag.test(use_executor=True)`` runs one DAG run. While the join streams, an "upstream system"
commits category changes to ``dim_product`` and customer moves to ``dim_customer`` with plain SQL
from another process; the join captures every writer's changes (``change_capture: triggers``),
so it sees them (SSIJ semantics), and the update sensors fire on the new versions.
Afterwards the output is checked against an oracle: a plain hash join of the regenerated stream
with the dimension tables, as of each sale's ``sold_at`` for the customers - every sale leaves
exactly once (a fact row or a dead letter with its reason), with the product's surrogate key and
a category of the version before or after the update, and the customer version valid at its time.

``--source redis``: the same sales reach the join through a Redis stream (the local server,
:data:`DEMO_REDIS_URL`; a stream of this run's own, deleted afterwards) and the pipeline's source
is that stream (``kind: redis_stream``): the side process is also the producer, adding the
generator's sales to the stream at the run's rate (:func:`..workloads.redis_feed.feed`) from the
join's first, empty micro-batch on.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from .core.errors import ConfigError
from .core.files import write_private_json
from .demo_warehouse import (
    CHANGED_KEYS,
    FACT_TABLE,
    check_against_oracle,
    event_span,
    move_candidates,
    prepare_warehouse,
    write_upstream_changes,
)

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "dags" / "pipelines" / "sales_facts.yaml"
DAG_ID = "semijoin_sales_facts"
JOIN_TASK = "surrogate_keys"
BAR_WIDTH = 30
SIDE_GRACE_S = 30  # for the side process to end once its stdin closes (the upstream's last write included)
DEMO_REDIS_URL = "redis://127.0.0.1:6379/0"  # `semijoin demo --source redis`: the local Redis server
SOURCES = ("generator", "redis")
UI_USER = "admin"  # [core] simple_auth_manager_users' default user (admin:admin)
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"  # where the simple auth manager looks


def pipeline_spec(stream_rows: int, product_rows: int, customer_rows: int, rows_per_second: float) -> dict:
    """The reference pipeline's YAML as data, with this run's sizes."""
    spec = yaml.safe_load(PIPELINE.read_text())
    source = spec["source"]
    source.update(total_rows=stream_rows, master_rows=product_rows, rows_per_second=rows_per_second,
                  max_rows_per_batch=max(1000, min(source["max_rows_per_batch"], stream_rows // 8)))
    source["extra_keys"]["customer_nk"]["master_rows"] = customer_rows
    return spec


def redis_source(spec: dict, stream: str) -> dict:
    """The pipeline's source as a Redis stream of the generator's columns (the producer writes them)."""
    from .job.sources import source_from_dict

    generator = source_from_dict(spec["source"])
    schema = generator.stream_ddl.removesuffix(", sj_arrival DOUBLE")
    return {"kind": "redis_stream", "url": DEMO_REDIS_URL, "stream": stream, "schema": schema, "id_column": "tid",
            "total_rows": generator.total_rows, "max_rows_per_batch": generator.max_rows_per_batch}


def airflow_settings(home: Path, port: int) -> dict:
    """The environment of this run's Airflow (also written to ``airflow.cfg`` for ``airflow standalone``)."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "airflow_provider_semijoin.demo_executor.EndingLocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",  # a busy laptop: tasks wait for the API server, not fail
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API_AUTH__JWT_SECRET": _jwt_secret(home),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__SEMIJOIN__LOCAL_MASTER": "local[2]",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def _jwt_secret(home: Path) -> str:
    path = home / ".jwt_secret"
    if not path.exists():
        path.write_text(os.urandom(48).hex())
        path.chmod(0o600)
    return path.read_text().strip()


def _free_port(preferred: int = 0) -> int:
    """``preferred`` when it is free on this machine, else a free port."""
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free TCP port on 127.0.0.1")


def ensure_ui_password(home: Path) -> Path:
    """The password file of the UI's ``admin`` user (the simple auth manager's own file and format),
    written by the demo before any Airflow component starts, readable by this user only: Airflow
    then never generates the password itself, which would print it into the API server's log."""
    path = home / PASSWORDS_FILE
    passwords = json.loads(path.read_text() or "{}") if path.exists() else {}
    if UI_USER not in passwords:
        passwords[UI_USER] = secrets.token_urlsafe(12)
        write_private_json(path, passwords)
    path.chmod(0o600)
    return path


def prepare_home(home: Path, spec: dict) -> None:
    """The DAGs folder of this run (the factory file and the sized spec, its source the run's) and a fresh work folder."""
    dags = home / "dags"
    shutil.rmtree(dags, ignore_errors=True)
    (dags / "pipelines").mkdir(parents=True)
    shutil.copy(REPO / "dags" / "semijoin_pipelines.py", dags / "semijoin_pipelines.py")
    (dags / "pipelines" / PIPELINE.name).write_text(
        f"# {PIPELINE.relative_to(REPO)} with the sizes of this `semijoin demo` run\n" + yaml.safe_dump(spec, sort_keys=False))
    for name in ("checkpoints", "output", "stop"):  # a new run starts from the beginning of the stream
        shutil.rmtree(home / "semijoin" / name, ignore_errors=True)


def _latest_xcom(airflow_db: Path, key: str, since: float):
    """The join task's newest XCom ``key`` written at ``since`` (epoch seconds) or later: this
    demo's run, not an earlier one in the same home; None before there is one."""
    after = datetime.datetime.fromtimestamp(since, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    try:
        connection = sqlite3.connect(f"file:{airflow_db}?mode=ro", uri=True, timeout=1)
        try:
            row = connection.execute(  # (Airflow keeps naive UTC times in SQLite as this text: they sort as text)
                "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ? AND timestamp >= ? "
                "ORDER BY timestamp DESC LIMIT 1", (DAG_ID, JOIN_TASK, key, after)).fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    value = json.loads(row[0]) if isinstance(row[0], (str, bytes)) else row[0]
    return json.loads(value) if isinstance(value, str) else value


@contextlib.contextmanager
def output_to(log_path: Path):
    """Send this process's (and its children's) stdout and stderr to ``log_path``; yields a
    stream on the terminal, for the progress bar (Airflow and Spark log a lot while the run goes)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    console = open(os.dup(1), "w", buffering=1)
    with open(log_path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield console
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            console.close()


def watch_progress(airflow_db: Path, total: int, done: threading.Event, first_batch: threading.Event, console,
                   since: float) -> None:
    """A progress bar from the join task's ``semijoin_metrics`` XCom (its latest progress record
    since the run started)."""
    tty = console.isatty()
    shown = -1
    while not done.wait(0.5):
        record = _latest_xcom(airflow_db, "semijoin_metrics", since)
        if not record:
            continue
        first_batch.set()
        n = record.get("total_input_rows") or 0
        share = min(n / total, 1.0)
        bar = "#" * int(share * BAR_WIDTH) + "." * (BAR_WIDTH - int(share * BAR_WIDTH))
        rate = record.get("service_rate_tps")
        line = (f"join     [{bar}] {share:4.0%} {n:,}/{total:,} sales, micro-batch {record.get('batch_id')}, "
                f"{rate or 0:,.0f} tuples/s, {record.get('total_deadline_misses') or 0} deadline misses")
        if tty:
            console.write("\r" + line)
        elif int(share * 10) > shown:  # a log, not a terminal: a line per tenth
            shown = int(share * 10)
            console.write(line + "\n")
        console.flush()
    if tty:
        console.write("\n")


def side_process(airflow_db: str, url: str, products: list, moves: dict, total: int, since: float,
                 producer: dict | None = None) -> None:
    """The demo's second process: the progress bar (on its stdout), the upstream system and, with a
    ``producer`` (``--source redis``: the stream, the generator's settings, the rate), the sales
    written to the stream from the join's first micro-batch on, until its stdin closes. They read and write SQLite from threads, so they run apart from the process
    that forks Airflow's LocalExecutor workers: a fork while another thread holds SQLite's
    allocator lock leaves the forked task deadlocked at its first SQLite call; and opening
    ``airflow.db`` there would drop that process's POSIX locks on it when closed."""
    done, first_batch = threading.Event(), threading.Event()
    def seen_rows() -> int:
        return (_latest_xcom(Path(airflow_db), "semijoin_metrics", since) or {}).get("total_input_rows") or 0

    upstream = threading.Thread(target=write_upstream_changes, args=(url, seen_rows, products, moves, first_batch, done),
                                daemon=True)
    upstream.start()
    if producer is not None:
        threading.Thread(target=produce, args=(producer, first_batch, done), daemon=True).start()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        done.set()
        first_batch.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    watch_progress(Path(airflow_db), total, done, first_batch, sys.stdout, since)
    upstream.join()


def produce(producer: dict, first_batch: threading.Event, done: threading.Event) -> None:
    """The producer of ``--source redis``: the sales into the stream at the run's rate, from the
    join's first (empty) micro-batch on, as the generator's clock starts after it."""
    import redis

    from .workloads.redis_feed import feed

    first_batch.wait()
    client = redis.Redis.from_url(producer["url"])
    try:
        feed(client, producer["stream"], producer["settings"], producer["rows_per_second"], stop=done.is_set)
    finally:
        client.close()


def start_side_process(home: Path, url: str, spec: dict, before: dict, console,
                       producer: dict | None = None) -> subprocess.Popen:
    """:func:`side_process` in a new interpreter, writing to ``console``. Its arguments go through a
    file: the product keys are megabytes at the demo's sizes, and Linux caps one argument of a
    command at 128 KiB."""
    source = spec["source"]
    moves = {"customers": move_candidates(spec, before), "first_s": event_span(spec)[0],
             "rows_per_second": source["rows_per_second"], "ahead_rows": 3 * source["max_rows_per_batch"]}
    arguments = {"airflow_db": str(home / "airflow.db"), "url": url, "total": source["total_rows"],
                 "products": sorted(before["dim_product"]), "moves": moves, "since": time.time(), "producer": producer}
    path = home / "semijoin" / "side-process.json"
    write_private_json(path, arguments)
    code = ("import json, pathlib, sys; from airflow_provider_semijoin.demo import side_process; "
            "side_process(**json.loads(pathlib.Path(sys.argv[1]).read_text()))")
    return subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=console)


def _ends_with_this_process():
    """A ``preexec_fn`` that SIGTERMs the child when the thread that started it ends, however
    it ends (SIGKILL included: Linux's ``PR_SET_PDEATHSIG``); None where there is no such call.
    The API server runs in a session of its own, so a kill of the demo's process group misses
    it: without this, a demo killed from outside left its server running."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the forked child only calls it
    return lambda: prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def start_api_server(env: dict, home: Path, port: int) -> subprocess.Popen:
    log = open(home / "api-server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "airflow", "api-server", "--port", str(port), "--host", "127.0.0.1"],
                              env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              preexec_fn=_ends_with_this_process())
    deadline = time.time() + 180
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the Airflow API server ended at start-up; see {home / 'api-server.log'}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=2)
            return server
        except OSError:
            time.sleep(1)
    server.terminate()
    raise RuntimeError(f"the Airflow API server did not answer within 180 s; see {home / 'api-server.log'}")


def stop_executor_workers(grace_s: float = 20) -> None:
    """End the processes ``dag.test(use_executor=True)`` forked - the LocalExecutor's workers and
    the tasks they run - when the run is cut short (SIGTERM, Ctrl-C, an error): ``dag.test``
    ends its executor only when the DAG run ends, and at exit Python waits for a forked worker
    forever (a demo SIGTERMed mid-run sat in ``multiprocessing``'s exit function, its six idle
    workers never told to stop). SIGTERM first, SIGKILL what is left after ``grace_s``."""
    import multiprocessing

    import psutil

    workers = multiprocessing.active_children()
    processes = []
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(worker.pid)
            processes += [*parent.children(recursive=True), parent]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    for worker in workers:
        worker.join(5)


def stop_process(process: subprocess.Popen, grace_s: float = 20, signal_first: bool = True) -> None:
    """SIGTERM ``process`` (unless ``signal_first`` is False: it was asked to end some other way),
    give it ``grace_s`` to end, then SIGKILL it."""
    if signal_first:
        process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def load_dag(path: Path):
    module_spec = importlib.util.spec_from_file_location("semijoin_demo_pipelines", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, DAG_ID)


def run_demo(home: Path, *, stream_rows: int, product_rows: int, customer_rows: int, rows_per_second: float,
             ui_port: int = 8080, source: str = "generator", out=print) -> int:
    if stream_rows < 1000 or product_rows < 100 or customer_rows < 100:
        raise ConfigError("demo: --stream-rows must be at least 1000, --product-rows and --customer-rows at least 100")
    if not 0 < ui_port < 65536:
        raise ConfigError(f"demo: --ui-port {ui_port} is not a TCP port (expected 1 to 65535)")
    if source not in SOURCES:
        raise ConfigError(f"demo: --source {source!r} is not one of {list(SOURCES)}")
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (a CI timeout, `kill`) ends the demo as Ctrl-C does: through the `finally` blocks
        # that stop its API server, which runs in a process group of its own
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started_at = time.time()
    home = home.resolve()
    (home / "semijoin").mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = airflow_settings(home, port)
    spec = pipeline_spec(stream_rows, product_rows, customer_rows, rows_per_second)
    producer = redis_producer(spec) if source == "redis" else None
    prepare_home(home, spec if producer is None else {**spec, "source": redis_source(spec, producer["stream"])})
    write_airflow_cfg(home, env)
    ensure_ui_password(home)
    os.environ.update(env)  # before airflow is imported: it reads its configuration once
    url = f"sqlite:///{home / 'semijoin' / 'master.db'}"
    before = prepare_warehouse(url, spec, product_rows, customer_rows)
    out(f"home     {home} (AIRFLOW_HOME: metadata DB airflow.db, DAGs, warehouse semijoin/master.db)")
    out(f"master   dim_product {product_rows:,} rows, dim_customer {customer_rows:,} customers in "
        f"{sum(map(len, before['dim_customer'].values())):,} versions (type 2) (SQLite)")
    out(f"stream   {stream_rows:,} sales at {rows_per_second:,.0f}/s, Zipf product and customer keys "
        f"(2% unknown products -> unknown member -1, 1% unknown customers -> dead letter)"
        + ("" if producer is None else f", through Redis stream {producer['stream']} at {DEMO_REDIS_URL}"))
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env={**os.environ, **env}, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = start_api_server({**os.environ, **env}, home, port)
    out(f"airflow  metadata DB ready, API server on 127.0.0.1:{port}; DAG run of {DAG_ID} starts "
        f"({time.time() - started_at:.0f} s)")
    out(f"         (Airflow's and Spark's logs: {home / 'dag-run.log'}, task logs under {home / 'logs'})")
    try:
        with output_to(home / "dag-run.log") as console:
            side = start_side_process(home, url, spec, before, console, producer)
            try:
                run = load_dag(home / "dags" / "semijoin_pipelines.py").test(use_executor=True)
            except BaseException:
                stop_executor_workers()
                raise
            finally:
                side.stdin.close()  # it ends its progress bar and returns
                stop_process(side, grace_s=SIDE_GRACE_S, signal_first=False)
    finally:
        stop_process(server)
        if producer is not None:
            delete_stream(producer)
    code = report(run, home, url, spec, before, started_at, out)
    show_ui_route(home, _free_port(ui_port), out)
    return code


def redis_producer(spec: dict) -> dict:
    """What the producer of ``--source redis`` writes: the generator's sales, to a stream of this run's own."""
    import redis

    from .job.sources import source_from_dict

    client = redis.Redis.from_url(DEMO_REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise ConfigError(f"demo: --source redis needs a Redis server at {DEMO_REDIS_URL} ({exc})") from None
    finally:
        client.close()
    return {"url": DEMO_REDIS_URL, "stream": f"semijoin-demo-{secrets.token_hex(4)}",
            "settings": source_from_dict(spec["source"]).settings(), "rows_per_second": spec["source"]["rows_per_second"]}


def delete_stream(producer: dict) -> None:
    import redis

    client = redis.Redis.from_url(producer["url"])
    try:
        client.delete(producer["stream"])
    finally:
        client.close()


def report(run, home: Path, url: str, spec: dict, before: dict, started_at: float, out) -> int:
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    summary = _latest_xcom(home / "airflow.db", "return_value", started_at) or {}
    last = summary.get("last_progress") or {}
    info = _latest_xcom(home / "airflow.db", "semijoin_info", started_at) or {}
    check = check_against_oracle(url, spec, before, home / "semijoin" / "output" / DAG_ID / JOIN_TASK / "dead_letter")
    reasons = Counter()
    dead = home / "semijoin" / "output" / DAG_ID / JOIN_TASK / "dead_letter"
    if dead.exists():
        reasons.update(pq.read_table(dead, columns=["reason"])["reason"].to_pylist())
    n_in = summary.get("input_rows", 0)
    out(f"dag run  {run.run_id}: {run.state} ({', '.join(f'{k} {v}' for k, v in sorted(states.items()))})")
    out(f"join     {info.get('algorithm', '?')} (auto chose {', '.join(c['algorithm'] for c in info.get('auto_choices', {}).values()) or '-'}), "
        f"{summary.get('batches', 0)} micro-batches (the first an empty warm-up) in {summary.get('duration_s', 0):.1f} s")
    out(f"input    {n_in:,} sales")
    out(f"matched  {summary.get('output_rows', 0):,} facts in {FACT_TABLE} ({check['unknown_products']:,} with product_sk -1: product not in dim_product)")
    out(f"unmatched by reason: customer {dict(reasons) or '{}'} -> dead letters ({summary.get('unmatched', 0):,}); "
        f"product {{'not_in_master': {check['unknown_products']:,}}} -> unknown member -1 in fact_sales")
    rate = n_in / summary["duration_s"] if summary.get("duration_s") else 0
    out(f"rate     {rate:,.0f} sales/s end to end; last micro-batch {last.get('service_rate_tps') or 0:,.0f} tuples/s in the joins")
    out(f"latency  p99 {last.get('latency_ms_p99')} ms (last micro-batch); deadline {spec['deadline']['max_latency_s']} s: "
        f"{summary.get('deadline_misses', 0):,} of {n_in:,} sales missed it (the stream's clock starts after Spark's "
        "warm-up micro-batch, so every miss is a steady-state one)")
    out(f"updates  {CHANGED_KEYS} product category and {check['moves']} customer moves: changes committed with plain SQL by another "
        f"process while the join ran, captured by triggers: changes_dim_product {states.get('changes_dim_product')}, "
        f"changes_dim_customer {states.get('changes_dim_customer')}")
    out(f"customers type 2 ({check['customer_versions']:,} versions of {len(before['dim_customer']):,} customers at the start), "
        f"{check['moves']} moves committed while the join ran (the current version closed, a new one inserted, one transaction "
        f"each); every sale has the version valid at its sold_at: {'yes' if check['wrong'] == 0 else 'NO'} "
        f"({check['sales_after_a_move']:,} sales after a move)")
    out(f"check    exactly once against the as-of oracle (hash join of the stream with the dimensions, the customer as of "
        f"sold_at): {'yes' if check['ok'] else 'NO'} (lost {check['lost']}, duplicated {check['duplicated']}, "
        f"wrong keys {check['wrong']}, dead letters {check['dead_letters']:,} of {check['expected_dead_letters']:,} expected)")
    out(f"time     {time.time() - started_at:.0f} s in all")
    ok = str(run.state) == "success" and check["ok"] and n_in == spec["source"]["total_rows"]
    return 0 if ok else 1


def show_ui_route(home: Path, port: int, out) -> None:
    """How to see the finished run in the Airflow UI: an API server on this home serves it (the
    run, its task logs and the Semi-joins pages read the metadata DB; no scheduler is needed)."""
    out("")
    out("See the run in the Airflow UI: start an API server on this home (Ctrl-C stops it),")
    out(f"  AIRFLOW_HOME={home} {Path(sys.executable).parent / 'airflow'} api-server --port {port}")
    out(f"then open http://localhost:{port}/plugin/semijoin (menu Semi-joins; task {JOIN_TASK}, tab Semi-join) "
        f"and log in as {UI_USER} with the password in {home / PASSWORDS_FILE}")


def write_airflow_cfg(home: Path, env: dict) -> None:
    """``airflow.cfg`` of this home, so ``airflow standalone`` with AIRFLOW_HOME=home sees the same run."""
    keep = {k: v for k, v in env.items() if k.startswith("AIRFLOW__") and "EXECUTION_API" not in k and "__API__" not in k}
    sections: dict = {}
    for name, value in keep.items():
        _, section, key = name.split("__", 2)
        sections.setdefault(section.lower(), {})[key.lower()] = value
    (home / "airflow.cfg").write_text("".join(
        f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()) + "\n" for section, values in sections.items()))
