"""Hostile command lines (issue 13): ``semijoin generate/join/algorithms/soak`` with hostile
option values, missing and unknown options, in-process through ``cli.main(argv)`` and a few
through a real process. Every run ends in exit 0, or in exit 2 with ONE line
``semijoin: error: ...`` on stderr (argparse's own errors included); never a traceback."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.files import write_table
from airflow_provider_semijoin.workloads import generate_master, zipf_stream

from .strategies import INJECTION, ODD_TEXT
from .tally import record

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
SMALL_OR_BAD_NUMBER = st.sampled_from(["-1", "0", "abc", "1e3", "nan", "inf", "-inf", "", "9" * 30, "0x10", "1_000",
                                       "2.5", " 7", "1e-300"]) | st.integers(-5, 3000).map(str)
HOSTILE_ARG = st.sampled_from(INJECTION + [t for t in ODD_TEXT if "\x00" not in t and "\ud800" not in t]) \
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30) \
    | SMALL_OR_BAD_NUMBER
HOSTILE_ARG = HOSTILE_ARG.map(lambda v: v.lstrip("/") or v)  # relative: files it names land in the test's folder


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    url = f"sqlite:///{folder / 'm.db'}"
    generate_master(url, "product", 500, seed=0)
    write_table(folder / "s.parquet", zipf_stream(300, 500, missing=0.1, seed=1))
    (folder / "cwd" / "inner").mkdir(parents=True)  # '../x' stays inside the test's folder
    return folder, url


def base_argv(command: str, folder, url) -> list[str]:
    return {
        "join": ["join", "--algorithm", "hybridjoin", "--master", url, "--table", "product", "--key", "nk",
                 "--select", "sk,name", "--stream", str(folder / "s.parquet"), "--stream-key", "nk",
                 "--out", str(folder / "o.parquet"), "--unmatched", str(folder / "u.csv"), "--memory", "1MB",
                 "--set", "page_rows=50", "--stats", str(folder / "st.json")],
        "generate master": ["generate", "master", "--db", f"sqlite:///{folder / 'g.db'}", "--table", "g", "--rows", "200",
                            "--key-type", "str", "--seed", "1", "--replace"],
        "generate stream": ["generate", "stream", "--out", str(folder / "g.jsonl"), "--rows", "200", "--master-rows", "100",
                            "--zipf", "1.1", "--shape", "random", "--missing", "0.1", "--key-type", "int", "--seed", "2",
                            "--rate", "100"],
        "algorithms": ["algorithms", "--json"],
    }[command]


@st.composite
def command_lines(draw, folder, url):
    command = draw(st.sampled_from(["join", "join", "generate master", "generate stream", "algorithms"]))
    argv = base_argv(command, folder, url)
    options = [i for i, a in enumerate(argv) if a.startswith("--")]
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["value", "value", "value", "drop", "unknown", "repeat", "positional"]))
        i = draw(st.sampled_from(options))
        if op == "value" and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            argv[i + 1] = draw(HOSTILE_ARG)
        elif op == "drop" and i + 1 < len(argv):
            del argv[i:i + 2]
            options = [j for j, a in enumerate(argv) if a.startswith("--")]
            if not options:
                break
        elif op == "unknown":
            argv += ["--" + draw(st.sampled_from(["bogus", "memroy", "x; rm -rf /"])), draw(HOSTILE_ARG)]
        elif op == "repeat":
            argv += [argv[i], draw(HOSTILE_ARG)]
        else:
            argv.append(draw(HOSTILE_ARG))
    return command, argv


def run_main(argv: list[str], cwd) -> tuple[int, str, str]:
    """``main(argv)`` in ``cwd`` (a hostile relative path, e.g. for --stats, lands there)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def check_outcome(surface: str, code, err: str) -> None:
    assert "Traceback" not in err, err
    if code == 0:
        record(surface)
        return
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and err.startswith("semijoin: error: "), err
    record(surface, err[len("semijoin: error: "):].strip())


@FAST
@given(data=st.data())
def test_hostile_command_lines(files, data):
    folder, url = files
    command, argv = data.draw(command_lines(folder, url))
    code, _, err = run_main(argv, folder / "cwd" / "inner")
    check_outcome(f"CLI {command} (in-process)", code, err)


@pytest.mark.parametrize("argv", [
    ["join", "--algorithm", "hybridjoin"],
    ["generate", "master", "--db", "sqlite:///x.db", "--rows", "abc"],
    ["nosuch"],
    [],
    ["soak", "--minutes", "nan"],
    ["soak", "--minutes", "1", "--master", "sqlite:///soak.db", "--kill-every", "5"],
    ["soak", "--minutes", "1", "--table", "x; DROP TABLE y"],
])
def test_hostile_command_lines_in_a_real_process(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "airflow_provider_semijoin.cli", *argv], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)  # the soak's default --out is relative
    check_outcome("CLI (real process)", proc.returncode, proc.stderr)
    assert proc.returncode == 2
