"""A private Redis server for the tests that stop and start one: ``redis-server`` on a free port of
127.0.0.1, in a temporary folder, with an append-only file there so its streams outlive a
restart (and ``password``, its ``requirepass``). The shared server (127.0.0.1:6379, keeping nothing on disk) is never restarted by a test.
:meth:`RedisServer.stop` ends the server by its pid; :meth:`RedisServer.start` starts it again on
the same port and folder."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import redis

SHARED_URL = "redis://127.0.0.1:6379/0"
START_TIMEOUT_S = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, root: Path | None = None, password: str | None = None):
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian's redis-server, as .ci/setup installs)")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="sj-redis-", dir=root))
        self.port = _free_port()
        self.password = password
        self.url = f"redis://{':' + quote(password, safe='') + '@' if password else ''}127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--logfile", str(self.dir / "redis.log"),
             *(["--requirepass", self.password] if self.password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, password=self.password)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.BusyLoadingError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"the private redis-server did not start (see {self.dir / 'redis.log'})") from None
                time.sleep(0.1)
            finally:
                client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
