"""The demo's executor: Airflow's LocalExecutor whose end cannot hang.

``dag.test(use_executor=True)`` ends its LocalExecutor when the DAG run ends: ``end()`` puts one
stop message on the workers' queue per worker it finds alive and joins them. A demo on a busy
machine once sat there for good after its run had succeeded (py-spy: one idle worker in the
queue's ``recv`` holding its read lock, another waiting for that lock, one worker already gone,
the queue empty - fewer stop messages than workers waiting). This ``end()`` puts two stop
messages per worker (a worker takes one and leaves; the rest go with the queue) and waits for
each worker ``END_WAIT_S`` at most, then terminates it: the run is over, no task is left to wait
for.
"""

from __future__ import annotations

import time

from airflow.executors.local_executor import LocalExecutor

END_WAIT_S = 30.0  # how long end() waits for the workers, all together, before it terminates the rest


class EndingLocalExecutor(LocalExecutor):
    """:class:`LocalExecutor` whose :meth:`end` stops every worker within ``END_WAIT_S``."""

    def end(self) -> None:
        for _ in range(2 * len(self.workers)):
            self.activity_queue.put(None)
        deadline = time.monotonic() + END_WAIT_S
        for proc in self.workers.values():
            proc.join(max(deadline - time.monotonic(), 0.0))
            if proc.is_alive():
                self.log.warning("LocalExecutor worker %s did not stop within %.0f s of the run's end; terminated",
                                 proc.pid, END_WAIT_S)
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
            proc.close()
        self._read_results()
        self.activity_queue.close()
        self.result_queue.close()
