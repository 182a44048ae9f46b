"""Where a bench's cores go: CPU seconds by process class, read from Linux's ``/proc``.

A Spark pipeline's work is spread over processes: the driver (this Python process: the join
engine, ``foreachBatch``, the sinks), Spark's JVM (a child of the driver), Spark's Python workers
(children of the JVM: the generator source, Arrow transfers) and the database server holding R
(when it runs on this machine). On a machine with few cores they compete, so a pipeline's rate
is bounded by the cores over the CPU it spends a tuple, whatever overlaps:

    rate <= cores / (CPU seconds a tuple, every process)

:class:`ProcessCpu` snapshots each process's CPU seconds (``utime + stime`` of
``/proc/<pid>/stat``) by class; :func:`cpu_split` turns two snapshots and the tuples completed
between them into cores busy and microseconds a tuple per class. A process that started
between the snapshots counts from zero; one that ended is lost (Spark reuses its Python
workers, so few end). Where ``/proc`` is missing (not Linux) only the driver is read
(``os.times``).
"""

from __future__ import annotations

import os
from pathlib import Path

DRIVER, SPARK_JVM, SPARK_PYTHON, DATABASE = "driver", "spark_jvm", "spark_python", "database"
CLASSES = (DRIVER, SPARK_JVM, SPARK_PYTHON, DATABASE)
DATABASE_COMMANDS = ("mariadbd", "mysqld")

Snapshot = dict[int, tuple[str, float]]  # pid -> (class, CPU seconds so far)


def _stat(proc: Path, pid: str) -> tuple[str, int, float] | None:
    """(command name, parent pid, CPU seconds) of one process, None if it is gone."""
    try:
        text = (proc / pid / "stat").read_text()
    except OSError:
        return None
    name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ProcessCpu:
    """Snapshots of CPU seconds by class: ``root`` (the driver), its descendants (``java``: Spark's
    JVM; any other: Spark's Python workers) and the database server (by command name)."""

    def __init__(self, root: int | None = None, proc: Path = Path("/proc")):
        self.root = os.getpid() if root is None else root
        self.proc = proc
        self.available = (proc / str(self.root) / "stat").exists()

    def snapshot(self) -> Snapshot:
        if not self.available:
            return {self.root: (DRIVER, sum(os.times()[:2]))}
        stats = {}
        for entry in self.proc.iterdir():
            if entry.name.isdigit() and (stat := _stat(self.proc, entry.name)) is not None:
                stats[int(entry.name)] = stat
        children: dict[int, list[int]] = {}
        for pid, (_, parent, _) in stats.items():
            children.setdefault(parent, []).append(pid)
        out: Snapshot = {pid: (DATABASE, cpu) for pid, (name, _, cpu) in stats.items() if name in DATABASE_COMMANDS}
        if self.root in stats:
            out[self.root] = (DRIVER, stats[self.root][2])
        stack = list(children.get(self.root, []))
        while stack:
            pid = stack.pop()
            name, _, cpu = stats[pid]
            out[pid] = (SPARK_JVM if name == "java" else SPARK_PYTHON, cpu)
            stack += children.get(pid, [])
        return out

    def reader(self, kinds: tuple[str, ...]):
        """A cheap snapshot of only the processes of ``kinds`` running now (no walk of ``/proc``:
        for a reading around every step of a join)."""
        pids = {pid: kind for pid, (kind, _) in self.snapshot().items() if kind in kinds}

        def read() -> Snapshot:
            out = {}
            for pid, kind in pids.items():
                if pid == os.getpid():
                    out[pid] = (kind, sum(os.times()[:2]))
                elif (stat := _stat(self.proc, str(pid))) is not None:
                    out[pid] = (kind, stat[2])
            return out

        return read


class CpuTally:
    """CPU seconds by class summed over intervals (each a snapshot before and after)."""

    def __init__(self):
        self.spent = dict.fromkeys(CLASSES, 0.0)

    def add(self, before: Snapshot, after: Snapshot) -> None:
        for kind, seconds in cpu_seconds(before, after).items():
            self.spent[kind] += seconds


def cpu_seconds(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds each class spent between two snapshots (a process new in ``after`` from zero)."""
    spent = dict.fromkeys(CLASSES, 0.0)
    for pid, (kind, cpu) in after.items():
        spent[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return spent


def cpu_split(spent: dict[str, float], seconds: float, tuples: int) -> dict | None:
    """Cores busy and CPU microseconds a tuple, by class and in all, from the CPU seconds
    ``spent`` (:func:`cpu_seconds`) over ``seconds`` in which ``tuples`` completed."""
    if seconds <= 0 or tuples <= 0:
        return None
    total = sum(spent.values())
    return {
        "cores": {kind: round(s / seconds, 2) for kind, s in spent.items()} | {"all": round(total / seconds, 2)},
        "us_per_tuple": {kind: round(s / tuples * 1e6, 3) for kind, s in spent.items()} | {"all": round(total / tuples * 1e6, 3)},
    }


def cpu_bound(us_per_tuple: float, cores: int | None = None) -> float | None:
    """The most tuples a second a path spending ``us_per_tuple`` CPU microseconds a tuple can
    reach on ``cores`` cores (this machine's), were every core busy with it."""
    cores = cores or os.cpu_count() or 1
    return round(cores / us_per_tuple * 1e6, 1) if us_per_tuple > 0 else None
