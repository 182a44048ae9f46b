"""The pyspark check every Spark start makes (:mod:`airflow_provider_semijoin.spark.install_check`):
this venv's pyspark passes; pyspark folders laid out as a pyspark-client clash leaves them (Python
files of another version than the jars, or no jars at all) get the one-sentence repair. The real
clash (pyspark-client installed over pyspark in a venv) is in ``test_wheel_install.py``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from airflow_provider_semijoin.spark.install_check import check_pyspark, pyspark_problem, pyspark_versions


def fake_pyspark(tmp_path: Path, python: str, jar: str | None) -> Path:
    folder = tmp_path / "pyspark"
    (folder / "jars").mkdir(parents=True)
    (folder / "version.py").write_text(f"__version__: str = '{python}'\n")
    (folder / "jars" / "spark-sql_2.13-9.9.9.jar").write_bytes(b"")  # not the core jar: ignored
    if jar is not None:
        (folder / "jars" / f"spark-core_2.13-{jar}.jar").write_bytes(b"")
    return folder


def test_this_venvs_pyspark_is_whole():
    folder = Path(next(iter(importlib.util.find_spec("pyspark").submodule_search_locations)))
    python, jars = pyspark_versions(folder)
    assert python == jars and python.startswith("4.")
    assert pyspark_problem(folder) is None
    check_pyspark()


def test_python_files_of_another_version_than_the_jars(tmp_path):
    folder = fake_pyspark(tmp_path, "4.2.0", "4.3.0")
    assert pyspark_versions(folder) == ("4.2.0", "4.3.0")
    assert pyspark_problem(folder) == (
        f"pyspark's Python files in {folder} are version 4.2.0 but its jars are 4.3.0 (another distribution, "
        "usually pyspark-client pulled in by apache-airflow-providers-apache-spark>=6, overwrote them), so every "
        "Python UDF would fail; repair with: pip install --force-reinstall --no-deps pyspark==4.3.0"
    )
    assert pyspark_problem(fake_pyspark(tmp_path / "same", "4.3.0", "4.3.0")) is None


def test_no_jars_at_all(tmp_path):
    folder = fake_pyspark(tmp_path, "4.2.0", None)
    assert pyspark_versions(folder) == ("4.2.0", None)
    assert pyspark_problem(folder) == (
        f"pyspark in {folder} has no Spark jars (only the Spark Connect client pyspark-client is installed, or an "
        "incomplete pyspark); repair with: pip install --force-reinstall --no-deps 'pyspark==4.2.0'"
    )


def test_a_spark_distributions_jars_and_an_unreadable_version(tmp_path):
    """pyspark from ``$SPARK_HOME/python`` has its jars in ``$SPARK_HOME/jars``; pyspark from a zip
    has no readable version.py: nothing to compare, no complaint."""
    home = tmp_path / "spark-4.3.0-bin"
    folder = fake_pyspark(home / "python", "4.3.0", None)
    (home / "jars").mkdir()
    (home / "jars" / "spark-core_2.13-4.3.0.jar").write_bytes(b"")
    assert pyspark_versions(folder, str(home)) == ("4.3.0", "4.3.0")
    assert pyspark_problem(folder, str(home)) is None
    (home / "jars" / "spark-core_2.13-4.3.0.jar").rename(home / "jars" / "spark-core_2.13-4.1.0.jar")
    assert "are version 4.3.0 but its jars are 4.1.0" in pyspark_problem(folder, str(home))
    (folder / "version.py").unlink()
    assert pyspark_versions(folder, str(home)) == (None, "4.1.0") and pyspark_problem(folder, str(home)) is None
