"""Where a bench's cores go (:mod:`airflow_provider_semijoin.bench.cpu`): processes classed by
their place under the driver and their command, CPU seconds between snapshots, the CPU bound."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from airflow_provider_semijoin.bench.cpu import CpuTally, ProcessCpu, cpu_bound, cpu_seconds, cpu_split

TICK = os.sysconf("SC_CLK_TCK")


def _proc(tmp_path, processes: dict[int, tuple[str, int, int]]):
    """A /proc of ``pid -> (command, parent, CPU ticks)``, the ticks split over utime and stime."""
    for pid, (name, parent, ticks) in processes.items():
        fields = ["S", str(parent)] + ["0"] * 9 + [str(ticks - ticks // 3), str(ticks // 3)] + ["0"] * 8
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    (tmp_path / "self").mkdir()  # not a process
    return tmp_path


def test_processes_are_classed_by_their_place_under_the_driver_and_their_command(tmp_path):
    proc = _proc(tmp_path, {
        100: ("python3", 1, 50 * TICK),  # the driver
        101: ("java", 100, 30 * TICK),  # Spark's JVM, the driver's child
        102: ("python3", 101, 4 * TICK),  # Spark's Python daemon, the JVM's child
        103: ("pyspark worker", 102, 6 * TICK),  # a worker forked by the daemon (a name with a space)
        200: ("mariadbd", 1, 70 * TICK),  # the database server
        300: ("java", 1, 99 * TICK),  # someone else's JVM: not counted
    })
    snapshot = ProcessCpu(root=100, proc=proc).snapshot()
    assert snapshot == {100: ("driver", 50.0), 101: ("spark_jvm", 30.0), 102: ("spark_python", 4.0),
                        103: ("spark_python", 6.0), 200: ("database", 70.0)}
    read = ProcessCpu(root=100, proc=proc).reader(("database", "spark_python"))  # the cheap reader: the processes seen now
    (proc / "103" / "stat").unlink()  # a worker ends: it is not read again
    assert read() == {102: ("spark_python", 4.0), 200: ("database", 70.0)}


def test_cpu_seconds_count_a_new_process_from_zero_and_split_by_tuple():
    before = {1: ("driver", 10.0), 2: ("spark_jvm", 4.0)}
    after = {1: ("driver", 12.0), 2: ("spark_jvm", 5.0), 3: ("spark_python", 0.5)}
    spent = cpu_seconds(before, after)
    assert spent == {"driver": 2.0, "spark_jvm": 1.0, "spark_python": 0.5, "database": 0.0}
    split = cpu_split(spent, seconds=2.0, tuples=500_000)
    assert split["cores"] == {"driver": 1.0, "spark_jvm": 0.5, "spark_python": 0.25, "database": 0.0, "all": 1.75}
    assert split["us_per_tuple"] == {"driver": 4.0, "spark_jvm": 2.0, "spark_python": 1.0, "database": 0.0, "all": 7.0}
    assert cpu_split(spent, seconds=0.0, tuples=5) is None and cpu_split(spent, seconds=1.0, tuples=0) is None
    tally = CpuTally()
    tally.add(before, after)
    tally.add(after, {1: ("driver", 13.0), 2: ("spark_jvm", 5.0), 3: ("spark_python", 0.5)})
    assert tally.spent == {"driver": 3.0, "spark_jvm": 1.0, "spark_python": 0.5, "database": 0.0}


def test_cpu_bound_is_the_cores_over_the_cpu_a_tuple():
    assert cpu_bound(2.5, cores=2) == 800_000.0
    assert cpu_bound(0.0, cores=2) is None
    assert cpu_bound(1.0) == os.cpu_count() * 1e6


def test_a_real_child_that_works_is_counted_under_the_driver():
    cpu = ProcessCpu()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\ninput()"], stdin=subprocess.PIPE)
    try:
        before = cpu.snapshot()
        assert before[os.getpid()][0] == "driver" and before[child.pid][0] == "spark_python"
        give_up = time.monotonic() + 60  # it burns 0.3 s of CPU, then waits for a line
        while cpu_seconds(before, cpu.snapshot())["spark_python"] < 0.2 and time.monotonic() < give_up:
            time.sleep(0.01)
        assert cpu_seconds(before, cpu.snapshot())["spark_python"] >= 0.2
    finally:
        child.communicate(b"\n", timeout=30)
