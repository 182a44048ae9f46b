"""OpenLineage: what a semi-join task reads and writes, in the form Airflow's OpenLineage provider
takes from an operator's ``get_openlineage_facets_on_complete`` (an ``OperatorLineage`` of input
and output datasets).

Inputs are the stream source and the master table of every join step; outputs the matched and
the dead-letter sinks. Dataset names follow the OpenLineage naming spec:

* MySQL/MariaDB table: namespace ``mysql://{host}:{port}``, name ``{database}.{table}``;
* local files (a landing folder, a Parquet sink): namespace ``file``, name the absolute path;
* Kafka (a ``spark`` source of format ``kafka``): ``kafka://{first bootstrap server}``, the topic;
* SQLite, which the spec does not list: namespace ``sqlite://{this host's name}``, name
  ``{absolute path of the database file}.{table}`` (the file is the database, as in MySQL's form).

The built-in generator is no dataset (nothing outside the task holds its tuples), nor is a Spark
source without a path or Kafka topic; they are left out (each source class says which datasets
it is, :meth:`~..job.sources.SourceSpec.datasets`, and each sink which one,
:meth:`~..job.spec.TargetSpec.dataset`). The provider is the optional extra ``openlineage``:
without it Airflow never calls the method, and nothing here is imported.
"""

from __future__ import annotations

from ..job.sources import table_dataset


def job_datasets(spec) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(inputs, outputs) of a :class:`~..job.spec.JobSpec`, each without repeats, in order."""
    inputs = spec.source.datasets() + [table_dataset(s.master.url, s.master.table) for s in spec.steps]
    outputs = [spec.sinks.matched.dataset(), spec.sinks.dead_letter.dataset()]
    return list(dict.fromkeys(inputs)), list(dict.fromkeys(outputs))


def operator_lineage(spec):
    """The ``OperatorLineage`` of a job (imports the OpenLineage provider: call it only from the
    provider's hooks)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    inputs, outputs = job_datasets(spec)
    return OperatorLineage(
        inputs=[Dataset(namespace=ns, name=name) for ns, name in inputs],
        outputs=[Dataset(namespace=ns, name=name) for ns, name in outputs],
    )
