"""The job spec of a streaming semi-join, apart from the Spark runtime (:mod:`..spark`): the spec
itself (:mod:`.spec`) and its assembly from what a task is given (:mod:`.assemble`). Pure data and
checks: importable where DAGs are parsed, without pyspark."""
