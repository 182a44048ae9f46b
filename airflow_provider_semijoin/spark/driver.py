"""The packaged driver of a streaming join, for ``spark-submit`` and for a plain process.

``python -m airflow_provider_semijoin.spark.driver --spec job.json`` (or ``spark-submit
--master spark://host:7077 <this file> --spec job.json``, :func:`driver_path`) runs the job in the session spark-submit made,
prints one ``SEMIJOIN_PROGRESS {json}`` line per micro-batch and a final ``SEMIJOIN_SUMMARY
{json}`` line, and exits 2 with one line ``semijoin: error: ...`` on bad configuration. SIGTERM
(what a scheduler sends to stop a task) stops the query between micro-batches.

With ``--summary FILE`` the summary is also written to FILE, whole or not at all: spark-submit
merges the driver's output with the JVM's log, which copies it in chunks, so a log line can land
inside the summary line; the operator reads the file (the driver runs where spark-submit does,
client mode, as it reads its ``--spec`` file there too).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Callable


def driver_path() -> str:
    """This file: the application spark-submit runs."""
    return __file__


def main(argv: list[str] | None = None, at_point: Callable[[str, int], None] | None = None) -> int:
    """Run the job of ``argv``; ``at_point`` is :func:`.runner.run_job`'s (a test's wrapper module kills the driver there)."""
    parser = argparse.ArgumentParser(prog="airflow_provider_semijoin.spark.driver")
    parser.add_argument("--spec", required=True, help="the job spec, a JSON file (JobSpec.to_dict())")
    parser.add_argument("--summary", default=None, help="also write the summary to this JSON file")
    parser.add_argument("--master", default=None, help="Spark master when not started by spark-submit (default local[2])")
    args = parser.parse_args(argv)

    # absolute imports: spark-submit runs this file as a script
    from airflow_provider_semijoin.core.errors import SemiJoinError
    from airflow_provider_semijoin.core.files import write_private_json
    from airflow_provider_semijoin.core.progress import SUMMARY_PREFIX, write_line
    from airflow_provider_semijoin.spark.runner import load_spec, run_job
    from airflow_provider_semijoin.spark.session import get_spark

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        spec = load_spec(args.spec)
        summary = run_job(spec, spark=get_spark(args.master, app_name=f"semijoin-{spec.name}", partitions=spec.partitions),
                          stop_event=stop, print_progress=True,
                          at_point=at_point)
    except SemiJoinError as exc:
        print(f"semijoin: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.summary:
        write_private_json(args.summary, summary, default=str)
    write_line(SUMMARY_PREFIX + json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
