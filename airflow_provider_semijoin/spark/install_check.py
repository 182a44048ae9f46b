"""Is this environment's pyspark whole? Checked before any Spark work starts.

``pyspark-client`` (the Spark Connect client, a dependency of apache-airflow-providers-apache-spark
6.x) installs its files into the same ``pyspark/`` folder as ``pyspark`` itself; whichever pip
installed last wins. When pyspark-client's Python files of another version overwrote pyspark's,
the Python side no longer matches the jars and every Python worker (UDFs, ``mapInArrow``, the
Python data sources) fails deep inside Spark ("Constructor ...UserDefinedPythonFunction(...) does
not exist"). The versions tell: ``pyspark/version.py`` against the ``spark-core`` jar beside it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path

from ..core.errors import ConfigError

_CORE_JAR = re.compile(r"^spark-core_[0-9.]+-(?P<version>.+)\.jar$")
_VERSION = re.compile(r"""__version__(?:\s*:\s*str)?\s*=\s*['"](?P<version>[^'"]+)['"]""")


def pyspark_versions(folder: Path, spark_home: str | None = None) -> tuple[str | None, str | None]:
    """(version of pyspark's Python files, version of its jars) in a ``pyspark`` package folder;
    None for a side that is not there. The jars are the pip package's ``pyspark/jars``, or a
    Spark distribution's ``$SPARK_HOME/jars`` (pyspark from ``$SPARK_HOME/python``)."""
    version_file = folder / "version.py"
    found = _VERSION.search(version_file.read_text()) if version_file.is_file() else None
    jars = []
    for jar_folder in [folder / "jars", *([Path(spark_home) / "jars"] if spark_home else [])]:
        jars = [m.group("version") for p in jar_folder.glob("spark-core_*.jar") if (m := _CORE_JAR.match(p.name))]
        if jars:
            break
    return (found.group("version") if found else None), (jars[0] if len(jars) == 1 else None)


def pyspark_problem(folder: Path, spark_home: str | None = None) -> str | None:
    """One sentence saying what is wrong with the pyspark installed in ``folder`` and how to
    repair it, or None when its Python files and jars are of one version (or when the Python
    side's version cannot be read, e.g. pyspark from a zip: nothing to compare)."""
    python, jars = pyspark_versions(folder, spark_home)
    if python is None:
        return None
    if jars is None:
        return (
            f"pyspark in {folder} has no Spark jars (only the Spark Connect client pyspark-client is "
            f"installed, or an incomplete pyspark); repair with: pip install --force-reinstall --no-deps "
            f"'pyspark=={python}'"
        )
    if python != jars:
        return (
            f"pyspark's Python files in {folder} are version {python} but its jars are {jars} (another "
            f"distribution, usually pyspark-client pulled in by apache-airflow-providers-apache-spark>=6, "
            f"overwrote them), so every Python UDF would fail; repair with: pip install --force-reinstall "
            f"--no-deps pyspark=={jars}"
        )
    return None


@functools.cache
def check_pyspark() -> None:
    """Raise :class:`ConfigError` (one sentence with the repair) when this environment's pyspark
    is not whole; once per process."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("pyspark is not installed; repair with: pip install 'pyspark>=4.3,<5'")
    problem = pyspark_problem(Path(next(iter(spec.submodule_search_locations))), os.environ.get("SPARK_HOME"))
    if problem is not None:
        raise ConfigError(problem)
