"""The job spec of a streaming semi-join, apart from the Spark runtime (:mod:`..spark`): the spec
(:mod:`.spec`), its sources, one class per kind (:mod:`.sources`), the checks they share
(:mod:`.checks`), the spec's assembly from what a task is given (:mod:`.assemble`) and the bytes
a carried row costs a step's plan (:mod:`.rowbytes`). Pure data and checks: importable where DAGs
are parsed, without pyspark or Airflow."""
