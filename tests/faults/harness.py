"""Real faults for the fault tests: a private MariaDB server the tests may kill, a killer of
database sessions, an installer of master-data changes, the oracle per version of R and the
fault table (faults.json and faults.md in ``$SEMIJOIN_ARTIFACTS``, default tests/artifacts).

Nothing here touches the shared server on 3306: every fault test starts its own ``mariadbd``
(own datadir, port and socket, as root) and kills it at teardown. The fixtures live here, not
in a conftest.py (a second ``conftest`` module would shadow the one tests import ``Backend``
from); test modules import the ones they use.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import MySQLdb
import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.stores import create_change_tables, install_changes, write_table
from airflow_provider_semijoin.workloads.master import master_table

SELECT = ["name", "category"]
ARTIFACTS = Path(os.environ.get("SEMIJOIN_ARTIFACTS", Path(__file__).resolve().parents[1] / "artifacts"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateMariaDB:
    """A mariadbd of the test's own: ``start``, ``stop`` (SIGTERM: a real shutdown) and ``close``
    (SIGKILL at teardown). The join connects as ``sj`` over TCP; root uses the socket."""

    USER, PASSWORD, DATABASE = "sj", "sj-fault-secret", "faults"

    def __init__(self, datadir: Path):
        self.datadir = datadir
        self.runtime = Path(tempfile.mkdtemp(prefix="sjdb"))  # a short socket path (108 bytes at most)
        self.socket = self.runtime / "mysqld.sock"
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
             "--auth-root-authentication-method=socket", "--skip-test-db"],
            check=True, capture_output=True, timeout=180,
        )
        self.start()
        with self.root() as root:
            cursor = root.cursor()
            cursor.execute(f"CREATE DATABASE {self.DATABASE}")
            cursor.execute(f"CREATE USER '{self.USER}'@'%' IDENTIFIED BY '{self.PASSWORD}'")
            cursor.execute(f"GRANT ALL ON {self.DATABASE}.* TO '{self.USER}'@'%'")

    @property
    def url(self) -> str:
        return f"mysql://{self.USER}:{self.PASSWORD}@127.0.0.1:{self.port}/{self.DATABASE}"

    @property
    def server(self) -> str:
        return f"127.0.0.1:{self.port}/{self.DATABASE}"

    def start(self, timeout_s: float = 90.0) -> None:
        self.process = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.datadir}", f"--port={self.port}",
             f"--socket={self.socket}", "--bind-address=127.0.0.1", "--user=root", "--skip-name-resolve",
             f"--pid-file={self.runtime / 'mysqld.pid'}", f"--log-error={self.runtime / 'error.log'}",
             f"--tmpdir={self.runtime}",  # its own: a starting mariadbd deletes the #sql* files of its tmpdir (/tmp: the shared server's)
             "--innodb-buffer-pool-size=64M", "--max-connections=200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        self.wait_up(timeout_s, poll_s=0.1, started=True)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=timeout_s)

    def close(self) -> None:
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.runtime, ignore_errors=True)

    def error_log(self) -> str:
        path = self.runtime / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def root(self):
        return MySQLdb.connect(unix_socket=str(self.socket), user="root", db="mysql", autocommit=True, connect_timeout=5)

    def sessions(self, user: str = USER) -> list[int]:
        with self.root() as root:
            cursor = root.cursor()
            cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND COMMAND <> 'Killed'", (user,))
            return [int(r[0]) for r in cursor.fetchall()]

    def wait_up(self, timeout_s: float = 120.0, poll_s: float = 0.2, started: bool = False) -> None:
        """Until root can connect (a server a test stopped may be restarted meanwhile); fails with
        mariadbd's error log when it did not answer in time, or when the process just ``started`` exited."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if started and self.process.poll() is not None:
                raise AssertionError(f"mariadbd exited: {self.error_log()[-2000:]}")
            try:
                self.root().close()
                return
            except MySQLdb.OperationalError:
                time.sleep(poll_s)
        raise AssertionError(f"{self.server} did not answer in {timeout_s} s: {self.error_log()[-2000:]}")


class SessionKiller(threading.Thread):
    """``KILL CONNECTION`` of one of the join's sessions (user ``sj``), ``times`` times, at random
    moments ``gap_s`` apart (seeded). ``kills`` holds when each kill landed."""

    def __init__(self, server: PrivateMariaDB, times: int, seed: int, gap_s=(0.05, 0.3)):
        super().__init__(daemon=True)
        self.server, self.times, self.gap_s = server, times, gap_s
        self.rng = np.random.default_rng(seed)
        self.kills: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with self.server.root() as root:
            cursor = root.cursor()
            while len(self.kills) < self.times and not self.halt.wait(self.rng.uniform(*self.gap_s)):
                cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s AND COMMAND <> 'Killed'",
                               (self.server.USER,))
                victims = sorted(int(r[0]) for r in cursor.fetchall())
                if not victims:
                    continue
                try:
                    cursor.execute(f"KILL CONNECTION {int(self.rng.choice(victims))}")
                    self.kills.append(time.monotonic())
                except MySQLdb.OperationalError:  # 1094 unknown thread: it ended meanwhile
                    pass

    def finish(self, timeout_s: float) -> None:
        """Wait until every kill landed (or ``timeout_s``), then stop (a killer never started: nothing)."""
        if self.ident is None:
            return
        self.join(timeout_s)
        self.halt.set()
        self.join(10)


class Versions:
    """R as the tests change it: ``rows[v]`` is R after v installed batches (key -> row)."""

    def __init__(self, server: PrivateMariaDB, n_rows: int, table: str):
        initial = master_table(n_rows)
        self.server, self.table, self.columns = server, table, initial.column_names
        with self.server.root() as root:
            root.select_db(server.DATABASE)
            write_table(root, table, initial, primary_key="nk")
        create_change_tables(server.url, table, "nk")
        self.rows = [{r["nk"]: r for r in initial.to_pylist()}]
        self.max_key = 2 * n_rows + 100

    def install_one(self, rng: np.random.Generator) -> None:
        """One batch of 5 changes (upserts of existing and new keys, deletes), as root; a batch whose
        session a stopped server took is counted if its version landed."""
        current = dict(self.rows[-1])
        changes = []
        for k in rng.choice(np.arange(1, self.max_key, 2), 5, replace=False).tolist():
            if k in current and rng.random() < 0.25:
                changes.append({**{c: None for c in self.columns}, "op": "D", "nk": k})
                del current[k]
            else:
                base = current.get(k) or {**self.rows[0][1], "nk": k, "sk": 10_000_000 + k}
                current[k] = {**base, "name": f"v{len(self.rows)}-{k}", "category": f"c{len(self.rows) % 9}"}
                changes.append({"op": "U", **current[k]})
        try:
            with self.server.root() as root:
                root.select_db(self.server.DATABASE)
                installed = install_changes(root, self.table, "nk", pa.Table.from_pylist(changes))
        except MySQLdb.OperationalError:  # the server stopped under the install
            self.server.wait_up()
            if self.version() == len(self.rows):  # it committed before the session went
                self.rows.append(current)
            return
        assert installed.version == len(self.rows)
        self.rows.append(current)

    def version(self) -> int:
        with self.server.root() as root:
            cursor = root.cursor()
            cursor.execute(f"SELECT COALESCE(MAX(version), 0) FROM {self.server.DATABASE}.{self.table}__sj_changes")
            return int(cursor.fetchone()[0])

    def expected(self, version: int, tids: list[int], keys: list[int]) -> tuple[Counter, Counter]:
        """The oracle of tuples ``tids`` with join keys ``keys`` against R at ``version`` (a join can
        read a version the installer thread has committed but not yet recorded: wait for it)."""
        deadline = time.monotonic() + 30
        while version >= len(self.rows):
            assert time.monotonic() < deadline, f"R's version {version} was read but never recorded by the installer"
            time.sleep(0.01)
        r = self.rows[version]
        matched = Counter((t, (r[k]["name"], r[k]["category"])) for t, k in zip(tids, keys) if k in r)
        unmatched = Counter((t, "not_in_master") for t, k in zip(tids, keys) if k not in r)
        return matched, unmatched


class Installer(threading.Thread):
    """Installs a change batch every ``gap_s`` seconds until stopped (master-data changes while
    the faults happen, SSIJ sec. IV-E)."""

    def __init__(self, versions: Versions, seed: int, gap_s: float = 0.15):
        super().__init__(daemon=True)
        self.versions, self.gap_s = versions, gap_s
        self.rng = np.random.default_rng(seed + 1)
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.wait(self.gap_s):
                self.versions.install_one(self.rng)
        except BaseException as exc:  # reported by the test
            self.error = exc


def exactly_once(tids: list[int], left: Counter) -> tuple[int, int]:
    """``(lost, duplicated)``: tuples that never left, tuples that left more than once."""
    lost = sum(1 for t in tids if left[t] == 0)
    duplicated = sum(1 for t in tids if left[t] > 1)
    return lost, duplicated


def record_fault(fault: str, *, injected: int, tuples_in: int, tuples_out: int, lost: int, duplicated: int,
                 recovery_s: list[float], how: str, seed: int) -> None:
    """One row of the fault table (replacing an earlier row of the same fault) and its Markdown."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "faults.json"
    rows = json.loads(path.read_text()) if path.exists() else {}
    rows[fault] = {
        "fault": fault, "injected": injected, "tuples_in": tuples_in, "tuples_out": tuples_out,
        "lost": lost, "duplicated": duplicated,
        "recovery_s_p50": round(statistics.median(recovery_s), 3) if recovery_s else None,
        "recovery_s_max": round(max(recovery_s), 3) if recovery_s else None,
        "how": how, "seed": seed, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.write_text(json.dumps(rows, indent=1, sort_keys=True))
    lines = ["| fault | injected | tuples in | out | lost | duplicated | recovery p50 / max (s) | how |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for row in sorted(rows.values(), key=lambda r: r["fault"]):
        recovery = f"{row['recovery_s_p50']} / {row['recovery_s_max']}" if row["recovery_s_p50"] is not None else "-"
        lines.append(f"| {row['fault']} | {row['injected']} | {row['tuples_in']} | {row['tuples_out']} | {row['lost']} "
                     f"| {row['duplicated']} | {recovery} | {row['how']} |")
    (ARTIFACTS / "faults.md").write_text("\n".join(lines) + "\n")


def fault_seed() -> int:
    """The seed of every random choice of the fault tests (``SEMIJOIN_FAULT_SEED``, default 13)."""
    return int(os.environ.get("SEMIJOIN_FAULT_SEED", "13"))


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory):
    """A private mariadbd the tests may kill sessions of, stop and start again (one per module)."""
    server = PrivateMariaDB(tmp_path_factory.mktemp("mariadb") / "data")
    yield server
    server.close()


@pytest.fixture
def sink_mariadb(tmp_path):
    """A second private mariadbd holding only the sinks (stopped for a batch by the sink test)."""
    server = PrivateMariaDB(tmp_path / "sink-data")
    yield server
    server.close()


@pytest.fixture(scope="session")
def seed() -> int:
    return fault_seed()
