"""The benchmarks, above the engine (:mod:`..core`) and the Spark layer (:mod:`..spark`).

* :mod:`.suite`: ``semijoin bench``, the steady state of every algorithm on one R, one run:
  each measured by :mod:`.steady`, with the opt-in cache sweep (:mod:`.sweep`), SSIJ's
  experiments (:mod:`.ssij_experiments`) and the database server's side (:mod:`.server`);
* :mod:`.cold`: ``semijoin bench --cold``, whole ``semijoin join`` runs, start-up included;
* :mod:`.micro`: ``semijoin bench --micro``, the cache-hit path alone on one core;
* :mod:`.spark_pipeline`: ``semijoin bench --spark``, the Spark pipeline against the core
  engine and Spark's own stream-static join (the paths it times: :mod:`.spark_paths`);
* :mod:`.partitions`: ``partitions = 1`` against 2 on a standalone cluster;
* :mod:`.reproduce` (with :mod:`.report` and the papers' claims in :mod:`.claims`):
  ``semijoin reproduce``, the papers' experiments as curves and a verdict per claim.
"""
