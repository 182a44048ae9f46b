"""A private MariaDB server with the binary log on, for the tests of the binlog capture.

The shared test server runs with ``log_bin=OFF`` and others test on it, so the capture's tests
start a server of their own: ``/usr/sbin/mariadbd`` on a temporary data directory initialised
by ``mysql_install_db``, a free port on 127.0.0.1, a socket of its own, and
``--log-bin --binlog-format=ROW --binlog-row-image=FULL --server-id=1``. Grants are checked
(no ``--skip-grant-tables``): root gets a random password, and two users are made, both with
every privilege on the test database, ``repl_user`` also with REPLICATION SLAVE and REPLICATION
CLIENT, ``plain_user`` without them. :meth:`BinlogServer.stop` ends the server by its pid.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "mysql_install_db"
START_TIMEOUT_S = 60
DATABASE = "sj_binlog"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BinlogServer:
    """A running private MariaDB server (see the module); ``url(user)`` -> its test database URL."""

    repl_user = "sjrepl"
    plain_user = "sjplain"

    def __init__(self, root: Path | None = None):
        install_db = shutil.which(INSTALL_DB) or shutil.which("mariadb-install-db")
        if not os.access(MARIADBD, os.X_OK) or install_db is None:
            raise RuntimeError(
                f"binlog test server: {MARIADBD} and {INSTALL_DB} are needed to start a MariaDB server with "
                "its binary log on (install the Debian package mariadb-server, as .ci/setup does)"
            )
        self.dir = Path(tempfile.mkdtemp(prefix="sj-binlog-", dir=root))
        self.datadir = self.dir / "data"
        self.socket = str(self.dir / "mysqld.sock")
        if len(self.socket) > 100:  # a Unix socket's path has at most 107 bytes
            self.socket = str(Path(tempfile.mkdtemp(prefix="sjb-")) / "mysqld.sock")
        self.port = _free_port()
        self.password = secrets.token_hex(12)  # one for root and the two users: a private server
        self.database = DATABASE
        self.process: subprocess.Popen | None = None
        self._initialise(install_db)
        self._start()
        self._create_users()

    def _initialise(self, install_db: str) -> None:
        done = subprocess.run(
            [install_db, "--no-defaults", f"--datadir={self.datadir}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"],
            capture_output=True, text=True, timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"binlog test server: {install_db} failed ({done.stderr.strip()[-500:]})")

    def _start(self) -> None:
        log = open(self.dir / "error.log", "ab")
        self.process = subprocess.Popen(
            [MARIADBD, "--no-defaults", f"--datadir={self.datadir}", "--user=root", f"--socket={self.socket}",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--pid-file={self.dir / 'mysqld.pid'}",
             f"--log-bin={self.dir / 'binlog'}", "--binlog-format=ROW", "--binlog-row-image=FULL", "--server-id=1",
             "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",  # Debian's defaults
             "--skip-name-resolve", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=48M",
             "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", f"--log-error={self.dir / 'error.log'}",
             f"--tmpdir={self.dir}"],  # its own: a starting mariadbd deletes the #sql* files of its tmpdir (/tmp: the shared server's)
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"binlog test server: mariadbd ended at start:\n{self.error_log()}")
            try:
                self.admin("SELECT 1", password="")
                return
            except Exception:  # noqa: BLE001 - not answering yet
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"binlog test server: mariadbd did not answer within {START_TIMEOUT_S} s:\n{self.error_log()}")

    def error_log(self) -> str:
        path = self.dir / "error.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no error log)"

    def admin(self, *statements: str, password: str | None = None) -> list[tuple]:
        """Run statements as root through the socket; the last one's rows."""
        import pymysql

        connection = pymysql.connect(unix_socket=self.socket, user="root",
                                     password=self.password if password is None else password, autocommit=True)
        try:
            with connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def _create_users(self) -> None:
        p = self.password
        statements = [f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{p}'"]
        self.admin(*statements, password="")
        db = self.database
        self.admin(
            f"CREATE DATABASE {db}",
            *(f"CREATE USER '{u}'@'127.0.0.1' IDENTIFIED BY '{p}'" for u in (self.repl_user, self.plain_user)),
            *(f"GRANT ALL PRIVILEGES ON {db}.* TO '{u}'@'127.0.0.1'" for u in (self.repl_user, self.plain_user)),
            f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{self.repl_user}'@'127.0.0.1'",
        )

    def url(self, user: str | None = None) -> str:
        """``mysql://user:password@127.0.0.1:port/sj_binlog`` (the replication user by default)."""
        return f"mysql://{user or self.repl_user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def stop(self) -> None:
        """End the server by its pid and remove its files."""
        for sig, wait_s in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):  # a clean shutdown, else a kill
            if self.process is None or self.process.poll() is not None:
                break
            os.kill(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=wait_s)
        self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(Path(self.socket).parent, ignore_errors=True)
