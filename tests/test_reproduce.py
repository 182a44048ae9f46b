"""``semijoin reproduce``: the small scale end to end (every experiment, its plot holding every
algorithm, a verdict per claim), and the judging of a claim on cells made up for the purpose."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
from pathlib import Path

import pytest

from airflow_provider_semijoin import __version__
from airflow_provider_semijoin.bench.claims import CLAIMS, judge
from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core import costmodel as cm
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.prediction import explain
from airflow_provider_semijoin.bench.reproduce import (DBMS_JOIN, EXPERIMENTS, MEMORY_ALGORITHMS, SCALES, SKEW_ALGORITHMS,
                                                 SSIJ_ALGORITHMS, TEMPORAL_ALGORITHMS, Cell, Reproduction,
                                                 rewrite_report, run_reproduce)
from airflow_provider_semijoin.bench.report import _model_section, auto_choices, calibrated_per, calibration_line
from airflow_provider_semijoin.core.unitcosts import ComponentCosts

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.acceptance  # every experiment of the papers: test_readme runs `semijoin reproduce` on one in the first tier
def test_small_scale_writes_every_plot_with_every_algorithm_and_judges_every_claim(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["reproduce", "--scale", "small", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "results.json").read_text())
    plots = summary["plots"]
    assert set(plots) == set(EXPERIMENTS)
    for experiment, plot in plots.items():
        assert (out / plot["file"]).read_bytes()[:8] == PNG, experiment
    assert plots["skew"]["series"] == list(SKEW_ALGORITHMS)
    assert plots["memory"]["series"] == list(MEMORY_ALGORITHMS)  # each fits at least one budget of the sweep
    assert plots["ssij"]["series"] == list(SSIJ_ALGORITHMS)
    assert plots["temporal"]["series"] == list(TEMPORAL_ALGORITHMS)
    assert plots["policy"]["series"] == ["utility", "lru"]
    assert plots["dbms"]["series"] == ["ssij"]  # the DBMS's own join runs inside MySQL only: the master is SQLite
    assert plots["pq_vs_l"]["series"] == ["hybridjoin", "cachejoin"]
    assert set(plots["model"]["series"]) >= {"inlj", "meshjoin", "hybridjoin", "cachejoin"}
    cells = summary["cells"]
    assert all(len(c["rates"]) == 3 and c["min"] <= c["median"] <= c["max"]
               for c in cells if not c["refused"] and not c["unavailable"])
    report = (out / "README.md").read_text()
    assert f"| {DBMS_JOIN} | not run: runs inside MySQL/MariaDB; the master sqlite:///" in report
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert summary["code"].startswith(f"{__version__} (") and head in summary["code"]  # run from this checkout
    assert f"code {summary['code']}." in report
    # each cell with a model keeps the unit costs calibrated just before it, and the report shows their spread
    modelled = [c for c in cells if c["predicted_tps"]]
    assert modelled and all(ComponentCosts(**c["costs"]).row_s > 0 for c in modelled)
    assert len({c["costs"]["c_step"] for c in modelled}) > 1  # calibrated anew (each experiment here), not once
    assert calibration_line([Cell.from_dict(c) for c in cells], 3, "experiment") in report
    # each repeat of a modelled cell measured its iteration next to the model's: a cycle for SSIJ, a step otherwise
    assert all(len(c["iterations"]) == 3 and {i["per"] for i in c["iterations"]} == {"cycle" if c["algorithm"] == "ssij"
                                                                                     else "step"} for c in modelled)
    # and the model's inputs: the last repeat's prediction is worked out again from the cell alone;
    # the cell's is the median of its repeats' (a cache algorithm's at each repeat's hit ratio)
    for c in modelled:
        hits = c["hit_ratios"][-1] if c["hit_ratios"] and c["predicted_ideal_tps"] else None
        again = explain(c["algorithm"], c["memory_split"], ComponentCosts(**c["costs"]), summary["scale_settings"]["rows"],
                        c["stream"]["zipf"], c["stream"]["shape"], p_n=hits, settings=c["settings"])
        assert again.service_rate_tps == pytest.approx(c["predictions"][-1], abs=0.1), c["algorithm"]
        assert len(c["predictions"]) == 3 and c["predicted_tps"] == statistics.median(c["predictions"])
    assert len(summary["claims"]) == len(CLAIMS) > 0
    for verdict in summary["claims"]:
        assert verdict["verdict"] in ("reproduced", "not reproduced", "not measured")
        assert f"| {verdict['claim']} |" in report
    assert all(f"]({plot['file']})" in report for plot in plots.values())
    assert f"of {len(CLAIMS)} claims" in printed
    choices = auto_choices([Cell.from_dict(c) for c in cells])
    assert choices and f"in {sum(c['good'] for c in choices)} of {len(choices)} settings" in report
    # the report written again from results.json alone, measuring nothing, is the same report
    (out / "README.md").unlink()
    (out / plots["skew"]["file"]).unlink()
    assert main(["reproduce", "--out", str(out), "--report-only"]) == 0
    again = json.loads((out / "results.json").read_text())
    said = f" The report was written again from its results.json by code {again['report_code']} (`--report-only`)."
    assert said in (out / "README.md").read_text()
    assert (out / "README.md").read_text().replace(said, "") == report
    assert (out / plots["skew"]["file"]).read_bytes()[:8] == PNG
    assert again["claims"] == summary["claims"] and again["cells"] == summary["cells"]


def test_the_model_table_sets_an_iteration_measured_beside_the_models():
    """Tuples and milliseconds an iteration, measured / modelled, the medians over the repeats;
    a cell of a run whose code measured no iteration (read from its results.json) shows none."""
    repeats = [{"per": "step", "tuples": t, "ms": ms, "cpu_ms": cpu, "model_tuples": 8000.0, "model_ms": 10.0,
                "model_cpu_ms": 2.5} for t, ms, cpu in ((4000.0, 12.0, 6.0), (5000.0, 13.0, 7.0), (9000.0, 30.0, 9.0))]
    measured = Cell("skew", "hybridjoin", {"skew": 1.0}, [380_000.0, 390_000.0, 300_000.0], predicted_tps=800_000.0,
                    iterations=repeats)
    no_cpu = Cell.from_dict({**measured.as_dict(), "iterations": [
        {k: v for k, v in i.items() if "cpu" not in k} for i in repeats]})  # a run before the CPU was measured
    older = Cell.from_dict({k: v for k, v in measured.as_dict().items() if k != "iterations"})
    assert measured.iteration() == {"per": "step", "tuples": 5000.0, "ms": 13.0, "cpu_ms": 7.0, "model_tuples": 8000.0,
                                    "model_ms": 10.0, "model_cpu_ms": 2.5}
    assert older.iterations == [] and older.iteration() is None
    rows = [line for line in _model_section([measured, no_cpu, older]) if line.startswith("| skew | hybridjoin |")]
    assert rows == ["| skew | hybridjoin | skew 1 | 380,000 | 800,000 | 0.47 | - | 5,000 / 8,000 | 13 / 10 | 7 / 2.5 |",
                    "| skew | hybridjoin | skew 1 | 380,000 | 800,000 | 0.47 | - | 5,000 / 8,000 | 13 / 10 | - |",
                    "| skew | hybridjoin | skew 1 | 380,000 | 800,000 | 0.47 | - | - | - | - |"]


def test_a_scale_that_calibrates_each_repeat_predicts_a_cell_by_the_median_of_its_repeats(tmp_path):
    """The standard scale calibrates before every repeat (one calibration a cell left its
    prediction as noisy as the measurement); each repeat is predicted on its own costs."""
    scale = dataclasses.replace(SCALES["small"], rows=4_000, calibrate_per="repeat")
    run = Reproduction(f"sqlite:///{tmp_path / 'r.db'}", scale, out=lambda _line: None)
    cell = run.cell("skew", "hybridjoin", {"skew": 1.0}, run.config())
    assert run.calibrations == 3 and len(cell.rates) == len(cell.predictions) == 3
    assert len(set(cell.predictions)) > 1  # three calibrations, three predictions
    assert cell.predicted_tps == statistics.median(cell.predictions)
    assert cell.costs == run.costs[1].as_dict()  # the last repeat's, which the model inputs go with
    again = dataclasses.replace(scale, calibrate_per="experiment")
    run = Reproduction(f"sqlite:///{tmp_path / 'r.db'}", again, out=lambda _line: None)
    run.cell("skew", "hybridjoin", {"skew": 1.0}, run.config())
    run.cell("skew", "meshjoin", {"skew": 1.0}, run.config())
    assert run.calibrations == 1


def test_a_run_says_what_it_calibrated_for_an_older_run_too():
    assert calibrated_per({"calibrate_per": "repeat"}) == "repeat"
    assert calibrated_per({"calibrate_each_cell": True}) == "cell"  # results.json of a run before calibrate_per
    assert calibrated_per({"calibrate_each_cell": False}) == "experiment"
    cell = Cell("skew", "hybridjoin", {"skew": 1.0}, [1.0], costs=ComponentCosts(*([1e-6] * 26)).as_dict())
    assert "calibrated before each repeat, " in calibration_line([cell], 3, "repeat")
    assert calibration_line([cell], 3, "repeat").endswith(" A cell's prediction is the median of its repeats', each on its own calibration.")
    assert "calibrated before each cell, " in calibration_line([cell], 3, "cell") and "median of its repeats" not in calibration_line([cell], 3, "cell")


def test_report_only_needs_the_results_of_a_run(tmp_path):
    with pytest.raises(ConfigError, match=r"^out: '.*' holds no results.json of a run to write the report from$"):
        rewrite_report(tmp_path)


def test_auto_is_judged_by_its_pick_among_its_candidates_measured_in_a_setting():
    """Auto picks the highest prediction before the stream starts: a cache algorithm's with the
    ideal p_N (here below HYBRIDJOIN's), not at the hit ratio it measured (here above it);
    HYBRIDJOIN-L is not one of auto's candidates, and a setting of one candidate is not judged."""
    skew1 = {"skew": 1.0}
    made_up = [Cell("skew", "hybridjoin", skew1, [400.0], predicted_tps=500.0),
               Cell("skew", "meshjoin", skew1, [200.0], predicted_tps=300.0),
               Cell("skew", "cachejoin-pq", skew1, [420.0], predicted_tps=600.0, predicted_ideal_tps=450.0),
               Cell("skew", "hybridjoin-l", skew1, [1000.0], predicted_tps=1000.0),
               Cell("memory", "meshjoin", {"memory_share": 0.1}, [100.0], predicted_tps=900.0),
               Cell("memory", "hybridjoin", {"memory_share": 0.1}, [300.0], predicted_tps=800.0),
               Cell("memory", "hybridjoin", {"memory_share": 0.2}, [300.0], predicted_tps=800.0),
               Cell("ssij", "meshjoin", {"shape": "noperm"}, [100.0], predicted_tps=900.0),
               Cell("ssij", "hybridjoin", {"shape": "noperm"}, [300.0], predicted_tps=800.0)]
    choices = auto_choices(made_up)
    assert [(c["setting"], c["picked"], c["best"], round(c["share_of_best"], 3), c["good"]) for c in choices] == [
        ("skew 1", "hybridjoin", "cachejoin-pq", round(400 / 420, 3), True),
        ("memory_share 0.1", "meshjoin", "hybridjoin", round(100 / 300, 3), False)]


def test_an_unknown_scale_or_experiment_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"^scale: 'huge' is not one of \['small', 'standard'\]"):
        run_reproduce(f"sqlite:///{tmp_path / 'r.db'}", "huge", tmp_path)
    with pytest.raises(ConfigError, match=r"^experiments: 'speed' is not one of"):
        run_reproduce(f"sqlite:///{tmp_path / 'r.db'}", "small", tmp_path, experiments=["skew", "speed"])
    assert not (tmp_path / "r.db").exists()


CLAIM = {"id": "x", "paper": "P", "where": "sec. 1", "claim": "a beats b", "experiment": "skew",
         "a": {"algorithm": "hybridjoin", "skew": 1.0}, "b": {"algorithm": "meshjoin", "skew": 1.0}}


def cells(a_rates, b_rates):
    return [Cell("skew", "hybridjoin", {"skew": 1.0}, a_rates), Cell("skew", "meshjoin", {"skew": 1.0}, b_rates),
            Cell("skew", "meshjoin", {"skew": 0.0}, [1.0, 1.0, 1.0])]


@pytest.mark.parametrize("claim, a_rates, b_rates, verdict, factor", [
    (CLAIM, [30, 10, 20], [10, 10, 5], "reproduced", 2.0),  # medians 20 / 10
    (CLAIM, [9, 9, 9], [10, 10, 10], "not reproduced", 0.9),
    ({**CLAIM, "min_factor": 3.0}, [25, 25, 25], [10, 10, 10], "reproduced", 2.5),  # within TOLERANCE of 3x
    ({**CLAIM, "min_factor": 3.0}, [23, 23, 23], [10, 10, 10], "not reproduced", 2.3),
    ({**CLAIM, "max_factor": 1.1}, [10.5, 10.5, 10.5], [10, 10, 10], "reproduced", 1.05),
    ({**CLAIM, "max_factor": 1.1}, [12, 12, 12], [10, 10, 10], "not reproduced", 1.2),
])
def test_a_claim_is_judged_by_the_ratio_of_the_medians(claim, a_rates, b_rates, verdict, factor):
    found = judge(claim, cells(a_rates, b_rates))
    assert (found["verdict"], found["factor"]) == (verdict, factor)
    assert found["measured"].startswith("hybridjoin (skew 1.0) / meshjoin (skew 1.0) = ")


def test_a_claim_whose_cells_were_not_run_or_did_not_fit_is_not_measured():
    missing = judge({**CLAIM, "b": {"algorithm": "ssj", "skew": 1.0}}, cells([1], [1]))
    assert missing["verdict"] == "not measured" and "ssj (skew 1.0) was not run" in missing["measured"]
    refused = judge(CLAIM, cells([1, 2, 3], []))
    assert refused["verdict"] == "not measured" and "does not fit the budget" in refused["measured"]


def test_a_pq_claim_that_falls_short_gives_the_bound_of_its_own_run():
    """The reason of a -PQ claim not reproduced is worked out from the PQ cell's inputs: the bound on
    any choice of page at the run's R, skew, h_S and page size, and behind a front stage at the
    keys H_R held (from the measured hit ratio); a cell of an older run without them gets none."""
    n_keys, split = 200_000, {"stream_table_capacity_tuples": 50_000, "page_rows": 1024}
    stream = {"zipf": 0.5, "shape": "noperm"}
    pq_claim = next(c for c in CLAIMS if c["id"] == "pq-hj-skew")
    assert pq_claim["a"]["skew"] == 0.5
    found = judge(pq_claim, [Cell("skew", "hybridjoin-pq", {"skew": 0.5}, [9.0], memory_split=split, stream=stream),
                             Cell("skew", "hybridjoin-l", {"skew": 0.5}, [10.0])], n_keys)
    bound = cm.page_choice_bound(cm.page_probabilities(n_keys, 0.5, 1024, "noperm"), 50_000, 1024)
    assert found["verdict"] == "not reproduced" and bound > 1.0
    assert f"at most {bound:.2f}x the tuples a load of HYBRIDJOIN's oldest page serves here" in found["measured"]
    assert "front stage" not in found["measured"]

    cached_claim = next(c for c in CLAIMS if c["id"] == "pq-cj-skew-1")
    inner = {"cache_keys": 100, "inner.stream_table_capacity_tuples": 50_000, "inner.page_rows": 1024}
    behind = judge(cached_claim, [Cell("skew", "cachejoin-pq", {"skew": 1.0}, [9.0], memory_split=inner,
                                       stream={"zipf": 1.0, "shape": "noperm"}, hit_ratios=[0.5, 0.6, 0.7]),
                                  Cell("skew", "cachejoin-l", {"skew": 1.0}, [10.0])], n_keys)
    held = cm.keys_for_hit_ratio(0.6, n_keys, 1.0)
    alone = cm.page_choice_bound(cm.page_probabilities(n_keys, 1.0, 1024, "noperm"), 50_000, 1024)
    flatter = cm.page_choice_bound(cm.page_probabilities(n_keys, 1.0, 1024, "noperm", cached=held), 50_000, 1024)
    assert held > 100 and flatter < alone
    assert f"H_R ({held:,} keys at the measured hit ratio)" in behind["measured"]
    assert f"at most {flatter:.2f}x" in behind["measured"]

    older = judge(pq_claim, [Cell("skew", "hybridjoin-pq", {"skew": 0.5}, [9.0]),
                             Cell("skew", "hybridjoin-l", {"skew": 0.5}, [10.0])], n_keys)
    assert "serves little (costmodel.page_choice_bound)" in older["measured"]


def test_every_claim_names_cells_an_experiment_measures():
    from airflow_provider_semijoin.core.joins import ALGORITHMS

    for claim in CLAIMS:
        assert claim["experiment"] in EXPERIMENTS, claim["id"]
        for side in ("a", "b"):
            assert claim[side]["algorithm"] in (*ALGORITHMS, DBMS_JOIN), (claim["id"], side)


@pytest.mark.mysql
def test_ssij_is_set_against_the_dbms_own_index_join_inside_mysql(mysql_url, tmp_path):
    """The ``dbms`` experiment on MariaDB: the DBMS's cell holds one rate per repetition (its
    warm-buffer-pool runs of one INSERT ... SELECT join), and the claim is judged on the two."""
    summary = run_reproduce(mysql_url, "small", tmp_path, experiments=["dbms"], out=lambda _line: None)
    cells = {c["algorithm"]: c for c in summary["cells"]}
    assert set(cells) == {"ssij", DBMS_JOIN}
    assert len(cells[DBMS_JOIN]["rates"]) == 3 and min(cells[DBMS_JOIN]["rates"]) > 0
    assert summary["plots"]["dbms"]["series"] == ["ssij", DBMS_JOIN]
    verdict = next(v for v in summary["claims"] if v["id"] == "ssij-vs-dbms")
    factor = cells["ssij"]["median"] / cells[DBMS_JOIN]["median"]
    assert verdict["factor"] == round(factor, 3) and verdict["verdict"] in ("reproduced", "not reproduced")


def test_the_help_lists_every_experiment(capsys):
    with pytest.raises(SystemExit, match="0"):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = text.split("subset of: ", 1)[1].split(" (default: all)", 1)[0]
    assert listed.split(", ") == list(EXPERIMENTS)
