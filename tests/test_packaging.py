"""Packaging: provider registration, the `airflow providers list` view, the dependency lock,
and the layering rules (the core imports neither Airflow nor Spark; no module imports one that
imports it back, lazy and type-checking imports included)."""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DIST = "airflow-provider-semijoin"
PROVIDER_EP = "airflow_provider_semijoin.get_provider_info:get_provider_info"
REPO = Path(__file__).resolve().parents[1]


def _provider_entry_point() -> md.EntryPoint:
    eps = [ep for ep in md.entry_points(group="apache_airflow_provider") if ep.value == PROVIDER_EP]
    assert len(eps) == 1, f"expected one apache_airflow_provider entry point {PROVIDER_EP!r}, found {eps}"
    return eps[0]


def test_provider_entry_point_resolves_and_names_the_distribution():
    from airflow_provider_semijoin import __version__
    from airflow_provider_semijoin.get_provider_info import get_provider_info

    ep = _provider_entry_point()
    assert ep.load() is get_provider_info
    assert ep.dist is not None
    info = ep.load()()
    # Airflow's ProvidersManager compares package-name with the distribution's name and
    # refuses the provider on a mismatch.
    assert info["package-name"] == ep.dist.metadata["Name"] == DIST
    assert info["versions"] == [__version__] == [md.version(DIST)]
    assert info["name"] and info["description"]


def test_provider_info_matches_airflows_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from airflow_provider_semijoin.get_provider_info import get_provider_info

    # Locate airflow/provider_info.schema.json without importing airflow in this process.
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations
    schema_path = next(
        Path(p) / "provider_info.schema.json"
        for p in spec.submodule_search_locations
        if (Path(p) / "provider_info.schema.json").is_file()
    )
    schema = json.loads(schema_path.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    validator.validate(get_provider_info())
    # The same validator must reject a broken info dict, or the check above proves nothing.
    broken = {k: v for k, v in get_provider_info().items() if k != "name"}
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        validator.validate(broken)


def test_semijoin_console_script_is_declared():
    scripts = {ep.name: ep.value for ep in md.distribution(DIST).entry_points if ep.group == "console_scripts"}
    assert scripts.get("semijoin") == "airflow_provider_semijoin.cli:main"


def test_airflow_providers_list_shows_the_provider(tmp_path):
    from airflow_provider_semijoin import __version__

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow-home"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path / 'airflow.db'}",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    # `providers list` reads entry points only: no `airflow db migrate` needed.
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    providers = {p["package_name"]: p for p in json.loads(proc.stdout)}
    assert DIST in providers, f"{DIST} missing from: {sorted(providers)}\nstderr:\n{proc.stderr[-3000:]}"
    assert providers[DIST]["version"] == __version__
    # The providers we depend on are registered next to ours.
    assert {"apache-airflow-providers-apache-spark", "apache-airflow-providers-mysql"} <= set(providers)


def test_installed_dependencies_match_constraints_lock():
    """Every distribution our package needs (transitively, with the extras .ci/setup installs)
    is pinned in constraints.txt at exactly the installed version."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt line is not a pin: {line!r}"
            pins[canonicalize_name(name)] = version
    assert canonicalize_name(DIST) not in pins, "constraints.txt must not pin the project itself"

    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(DIST, frozenset({"test", "bench", "spark-submit", "openlineage"}))]
    problems = []
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        dist = md.distribution(name)
        if key != canonicalize_name(DIST) and pins.get(key) != dist.version:
            problems.append(f"{name}: installed {dist.version}, constraints.txt {pins.get(key)}")
        for req_text in dist.requires or []:
            req = Requirement(req_text)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in envs):
                todo.append((req.name, frozenset(req.extras)))
    assert len(seen) > 50  # airflow alone pulls in well over 50 distributions
    assert not problems, "installed versions differ from the lock:\n" + "\n".join(sorted(problems))


_LAYERING_PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    roots = sys.argv[1:]
    imported = []

    def fail(name):
        raise ImportError(f"cannot import {name} while walking the package")

    for root in roots:
        try:
            pkg = importlib.import_module(root)
        except ModuleNotFoundError as exc:
            if exc.name == root:
                continue  # that package does not exist (yet)
            raise
        imported.append(root)
        for mod in pkgutil.walk_packages(getattr(pkg, "__path__", []), root + ".", onerror=fail):
            importlib.import_module(mod.name)
            imported.append(mod.name)

    print(json.dumps({"imported": imported, "modules": sorted(sys.modules)}))
    """
)

# Packages the core and the workloads must never pull in (imports only point down).
FORBIDDEN_TOP = {"airflow", "pyspark"}
FORBIDDEN_OWN = tuple(
    f"airflow_provider_semijoin.{sub}"
    for sub in ("spark", "pipeline", "hooks", "operators", "sensors", "triggers", "plugins", "cli")
)


def _probe(*roots: str, pythonpath: Path | None = None) -> dict:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", _LAYERING_PROBE, *roots],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO / "tests",  # not the repo root: import the installed package
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _forbidden(modules: list[str]) -> list[str]:
    return sorted(
        m
        for m in modules
        if m.split(".")[0] in FORBIDDEN_TOP or any(m == f or m.startswith(f + ".") for f in FORBIDDEN_OWN)
    )


def test_core_and_workloads_import_neither_airflow_nor_spark():
    result = _probe(
        "airflow_provider_semijoin.core",
        "airflow_provider_semijoin.core.stores",
        "airflow_provider_semijoin.core.joins",
        "airflow_provider_semijoin.workloads",
    )
    imported = result["imported"]
    # Not vacuous: the core package and at least one module inside it were imported.
    assert "airflow_provider_semijoin.core" in imported
    assert any(m.startswith("airflow_provider_semijoin.core.") for m in imported), imported
    assert _forbidden(result["modules"]) == [], f"layering violated after importing {imported}"


def test_the_job_spec_imports_neither_airflow_nor_spark():
    """The job spec (:mod:`airflow_provider_semijoin.job`) is read where DAGs are parsed: pure, like the core."""
    result = _probe("airflow_provider_semijoin.job")
    assert "airflow_provider_semijoin.job.spec" in result["imported"], result["imported"]
    assert _forbidden(result["modules"]) == [], f"layering violated after importing {result['imported']}"


def test_layering_probe_detects_a_forbidden_import(tmp_path):
    # The same probe must walk into subpackages and see a forbidden import deep inside.
    pkg = tmp_path / "fake_layer" / "inner"
    pkg.mkdir(parents=True)
    (tmp_path / "fake_layer" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "uses_spark.py").write_text("import pyspark\n")
    result = _probe("fake_layer", "does_not_exist_yet", pythonpath=tmp_path)
    assert result["imported"] == ["fake_layer", "fake_layer.inner", "fake_layer.inner.uses_spark"]
    assert "pyspark" in _forbidden(result["modules"])


def test_layering_probe_reports_a_broken_module(tmp_path):
    (tmp_path / "broken_layer").mkdir()
    (tmp_path / "broken_layer" / "__init__.py").write_text("")
    (tmp_path / "broken_layer" / "bad.py").write_text("import no_such_module_xyz\n")
    with pytest.raises(AssertionError, match="No module named 'no_such_module_xyz'"):
        _probe("broken_layer", pythonpath=tmp_path)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere (top level, in functions, under
    ``TYPE_CHECKING``): ``from . import sub`` names the submodule, ``from .pkg import name`` the
    package (its ``__init__`` runs)."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    graph = {}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = ".".join((here[: len(here) - node.level + 1] if node.level else []) + ([node.module] if node.module else []))
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                found = subs if len(subs) == len(node.names) else [target, *subs]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            deps.update(m for m in found if m in modules and m != name)
        graph[name] = deps
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph(REPO / "airflow_provider_semijoin")
    assert len(graph) > 50 and graph["airflow_provider_semijoin.core.prediction"], "the walk found the package"
    assert import_cycles(graph) == []


PACKAGE = "airflow_provider_semijoin"
# (importer, imported): arrows that must not exist, lazy and type-checking imports included
FORBIDDEN_ARROWS = (
    ("spark", "workloads"),  # the generator is a source like any other: its class names its reader
    ("operators", "plugins"),  # the operators' extra link takes its URL from urls.py, as the plugin does
    ("core", "operators"),  # the algorithms know nothing of Airflow's operators
)
# (importer, imported): arrows that may reach only the public surface of ``imported`` - the
# package itself, what its __init__ exports - never one of its modules. The Airflow layer runs a
# job through ``spark.run_job``; what it knows of a job (a row's bytes in a plan, a sink's
# dataset) is the job spec's (issue 66). hooks/ are not in it: they are the runtime's adapter
# (the Spark session, spark-submit of the packaged driver).
SURFACE_ARROWS = tuple((layer, "spark") for layer in ("operators", "pipeline", "sensors", "triggers", "plugins"))
ARROW_RULES = [(a, b, False) for a, b in FORBIDDEN_ARROWS] + [(a, b, True) for a, b in SURFACE_ARROWS]


def arrows(graph: dict[str, set[str]], importer: str, imported: str, surface: bool = False) -> list[tuple[str, str]]:
    """The imports from a module of subpackage ``importer`` to one of ``imported``; with
    ``surface``, only those to one of its modules (the package itself is its public surface)."""
    def inside(module: str, sub: str) -> bool:
        return module == f"{PACKAGE}.{sub}" or module.startswith(f"{PACKAGE}.{sub}.")

    return sorted((m, d) for m, deps in graph.items() if inside(m, importer) for d in deps
                  if inside(d, imported) and not (surface and d == f"{PACKAGE}.{imported}"))


@pytest.mark.parametrize("importer, imported, surface", ARROW_RULES,
                         ids=[f"{a}->{b}{'.<module>' if s else ''}" for a, b, s in ARROW_RULES])
def test_no_forbidden_arrow_between_subpackages(importer, imported, surface):
    graph = import_graph(REPO / PACKAGE)
    assert arrows(graph, importer, imported, surface) == []


def test_the_core_names_no_operator():
    """No class of the core carries its Airflow operator's name (operators/join.py names them)."""
    named = [(path.name, node.value) for path in (REPO / PACKAGE / "core").rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith("Operator")]
    assert named == []


def test_the_arrow_check_sees_a_lazy_import(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "operators").mkdir(parents=True)
    (pkg / "plugins").mkdir()
    for folder in (pkg, pkg / "operators", pkg / "plugins"):
        (folder / "__init__.py").write_text("")
    (pkg / "plugins" / "urls.py").write_text("URL = 1\n")
    (pkg / "operators" / "job.py").write_text("def link():\n    from ..plugins.urls import URL\n    return URL\n")
    assert arrows(import_graph(pkg), "operators", "plugins") == [(f"{PACKAGE}.operators.job", f"{PACKAGE}.plugins.urls")]


def test_the_surface_check_lets_the_package_through_and_sees_a_module_behind_it(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "operators").mkdir(parents=True)
    (pkg / "spark").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "operators" / "__init__.py").write_text("")
    (pkg / "spark" / "__init__.py").write_text("def run_job():\n    return 1\n")
    (pkg / "spark" / "joinstate.py").write_text("ROW = 9\n")
    (pkg / "operators" / "job.py").write_text(
        "from ..spark import run_job\n\ndef size():\n    from ..spark.joinstate import ROW\n    return ROW\n")
    graph = import_graph(pkg)
    assert arrows(graph, "operators", "spark", surface=True) == [(f"{PACKAGE}.operators.job", f"{PACKAGE}.spark.joinstate")]
    assert len(arrows(graph, "operators", "spark")) == 2


def test_the_spark_surface_is_the_runners_run_job_imported_when_first_asked_for():
    """``spark.run_job`` is the runner's, imported when first asked for: importing the package (the
    hooks do where DAGs are parsed; the driver and the executors' workers do) loads no runtime."""
    probe = textwrap.dedent("""
        import sys
        import airflow_provider_semijoin.spark as spark
        assert spark.__all__ == ["run_job"] and "airflow_provider_semijoin.spark.runner" not in sys.modules
        from airflow_provider_semijoin.spark import run_job
        from airflow_provider_semijoin.spark.runner import run_job as runners
        assert run_job is runners
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=REPO / "tests")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_import_cycle_check_sees_a_lazy_cycle_through_a_package(tmp_path):
    pkg = tmp_path / "layered"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("from .b import B\n")
    (pkg / "inner" / "b.py").write_text("from ..low import L\nB = 1\n")
    (pkg / "low.py").write_text("def f():\n    from .inner.b import B\n    return B\nL = 2\n")
    (pkg / "free.py").write_text("from .inner import b\n")
    assert import_cycles(import_graph(pkg)) == [["layered.inner.b", "layered.low"]]
