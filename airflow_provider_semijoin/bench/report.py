"""The report of ``semijoin reproduce``: one PNG per experiment, the tables and the claims'
verdicts in ``README.md`` (:mod:`.reproduce` measures, this module draws and writes)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .steady import costs_line
from ..core.joins.registry import AUTO_CANDIDATES
from ..core.unitcosts import ComponentCosts

LOW, HIGH = 0.85, 1.15  # measured / predicted within this band: the model predicts
AUTO_WITHIN = 0.9  # auto's pick measures at least this share of the measured best: a good choice
AUTO_SWEEPS = ("skew", "memory")  # the sweeps whose settings auto's choice is judged in


def _label(setting: dict) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in setting.items())


def _cells(cells, experiment: str):
    return [c for c in cells if c.experiment == experiment]


def _by_algorithm(cells) -> dict[str, list]:
    grouped = defaultdict(list)
    for c in cells:
        grouped[c.algorithm].append(c)
    return grouped


def _line_plot(ax, cells, variable: str, scale_x: float = 1.0) -> list[str]:
    drawn = []
    for name, group in _by_algorithm(cells).items():
        points = [(c.setting[variable] * scale_x, c) for c in group if c.rates]
        if not points:
            continue
        xs = [x for x, _ in points]
        medians = [c.median for _, c in points]
        lows = [c.median - min(c.rates) for _, c in points]
        highs = [max(c.rates) - c.median for _, c in points]
        ax.errorbar(xs, medians, yerr=[lows, highs], marker="o", capsize=3, label=name)
        drawn.append(name)
    ax.set_yscale("log")  # the algorithms differ by orders of magnitude
    ax.set_ylabel("service rate (tuples/s), median, min-max")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return drawn


def _bar_plot(ax, cells, group_key: str, series_key: str) -> list[str]:
    groups = list(dict.fromkeys(c.setting[group_key] if group_key in c.setting else c.algorithm for c in cells))
    series = list(dict.fromkeys(c.setting[series_key] if series_key in c.setting else c.algorithm for c in cells))
    width = 0.8 / max(len(series), 1)
    for i, s in enumerate(series):
        xs, medians, errors = [], [], [[], []]
        for j, g in enumerate(groups):
            for c in cells:
                cg = c.setting.get(group_key, c.algorithm)
                cs = c.setting.get(series_key, c.algorithm)
                if cg == g and cs == s and c.rates:
                    xs.append(j + i * width)
                    medians.append(c.median)
                    errors[0].append(c.median - min(c.rates))
                    errors[1].append(max(c.rates) - c.median)
        ax.bar(xs, medians, width, yerr=errors, capsize=3, label=str(s))
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(groups))], [str(g) for g in groups])
    ax.set_ylabel("service rate (tuples/s), median, min-max")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    return [str(s) for s in series]


def _pq_over_l(cells) -> list[dict]:
    """-PQ / -L at each skew, per family, from the skew cells (median of the pairwise ratios)."""
    rows = []
    skew = _cells(cells, "skew")
    for family in ("hybridjoin", "cachejoin"):
        for zipf in dict.fromkeys(c.setting["skew"] for c in skew):
            pq = next((c for c in skew if c.algorithm == f"{family}-pq" and c.setting["skew"] == zipf and c.rates), None)
            lru = next((c for c in skew if c.algorithm == f"{family}-l" and c.setting["skew"] == zipf and c.rates), None)
            if pq and lru:
                ratios = sorted(p / q for p, q in zip(pq.rates, lru.rates) if q)
                if ratios:
                    rows.append({"family": family, "skew": zipf, "median": ratios[len(ratios) // 2],
                                 "min": ratios[0], "max": ratios[-1]})
    return rows


def _plot(folder: Path, name: str, draw) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    series = draw(ax)
    fig.tight_layout()
    path = folder / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return {"file": path.name, "series": series}


def plots(folder: Path, cells) -> dict[str, dict]:
    """One PNG per experiment that has cells; returns experiment -> its file and the series
    (algorithms, policies) drawn in it."""
    drawn = {}

    def titled(title, draw):
        def inner(ax):
            series = draw(ax)
            ax.set_title(title, fontsize=9)
            return series
        return inner

    if _cells(cells, "skew"):
        drawn["skew"] = _plot(folder, "skew", titled("service rate vs skew (Zipf exponent)",
                                                      lambda ax: (ax.set_xlabel("skew"), _line_plot(ax, _cells(cells, "skew"), "skew"))[1]))
    if _cells(cells, "memory"):
        drawn["memory"] = _plot(folder, "memory", titled("service rate vs memory (% of R), skew 1", lambda ax: (
            ax.set_xlabel("memory, % of R"), _line_plot(ax, _cells(cells, "memory"), "memory_share", 100.0))[1]))
    ratios = _pq_over_l(cells)
    if ratios:
        def draw_ratios(ax):
            series = []
            for family in ("hybridjoin", "cachejoin"):
                rows = [r for r in ratios if r["family"] == family]
                if rows:
                    ax.errorbar([r["skew"] for r in rows], [r["median"] for r in rows],
                                yerr=[[r["median"] - r["min"] for r in rows], [r["max"] - r["median"] for r in rows]],
                                marker="o", capsize=3, label=f"{family}-pq / {family}-l")
                    series.append(family)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xlabel("skew")
            ax.set_ylabel("-PQ / -L service rate")
            ax.legend(fontsize=7)
            return series
        drawn["pq_vs_l"] = _plot(folder, "pq_vs_l", titled("-PQ over -L", draw_ratios))
    for experiment, group_key, series_key, title in (
        ("ssij", "shape", "algorithm", "SSIJ vs MESHJOIN and HYBRIDJOIN, skew 1"),
        ("policy", "shape", "policy", "SSIJ page-cache policy: utility vs LRU"),
        ("temporal", "shape", "algorithm", "temporal-locality stream"),
        ("dbms", "stream", "algorithm", "SSIJ (10% of R) vs the DBMS's own index join"),
    ):
        run = [c for c in _cells(cells, experiment) if not c.unavailable]
        if run:
            drawn[experiment] = _plot(folder, experiment, titled(title, lambda ax, r=run, g=group_key, s=series_key:
                                                                   _bar_plot(ax, r, g, s)))
    if _cells(cells, "max_scan"):
        drawn["max_scan"] = _plot(folder, "max_scan", titled("SSIJ service rate vs maxScan", lambda ax: (
            ax.set_xlabel("maxScan (pages)"), _line_plot(ax, _cells(cells, "max_scan"), "max_scan"))[1]))
    modelled = [c for c in cells if c.measured_over_predicted is not None]
    if modelled:
        def draw_model(ax):
            groups = _by_algorithm(modelled)
            for name, group in groups.items():
                ax.scatter([c.predicted_tps for c in group], [c.median for c in group], s=14, label=name)
            top = max(max(c.predicted_tps, c.median) for c in modelled) * 1.2
            ax.plot([1, top], [1, top], color="grey", lw=0.8)
            ax.fill_between([1, top], [LOW, LOW * top], [HIGH, HIGH * top], color="grey", alpha=0.15)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("predicted (tuples/s)")
            ax.set_ylabel("measured (tuples/s)")
            ax.legend(fontsize=6, ncol=2)
            return list(groups)
        drawn["model"] = _plot(folder, "model", titled(f"measured vs predicted (band {LOW}-{HIGH})", draw_model))
    return drawn


def _cell_text(c) -> str:
    if c.unavailable:
        return f"not run: {c.unavailable}"
    if not c.rates:
        return "does not fit"
    return f"{c.median:,.0f} [{min(c.rates):,.0f}-{max(c.rates):,.0f}]"


def _table(cells) -> list[str]:
    settings = list(dict.fromkeys(_label(c.setting) for c in cells))
    names = list(dict.fromkeys(c.algorithm for c in cells))
    lines = ["| algorithm | " + " | ".join(settings) + " |", "|---|" + "---:|" * len(settings)]
    for name in names:
        row = {_label(c.setting): _cell_text(c) for c in cells if c.algorithm == name}
        lines.append(f"| {name} | " + " | ".join(row.get(s, "-") for s in settings) + " |")
    return lines


def _auto_prediction(cell) -> float:
    """The rate auto sees for ``cell`` before the stream starts: a cache algorithm's with the ideal p_N."""
    return cell.predicted_ideal_tps or cell.predicted_tps


def auto_choices(cells) -> list[dict]:
    """What ``algorithm: auto`` (:mod:`...pipeline.auto`) picks in each setting of the skew and
    memory sweeps, and how it measured against the best candidate measured there. Auto chooses
    before the stream starts, so a cache algorithm is taken at its prediction with the ideal
    p_N, not at the hit ratio it measured; each cell's prediction used the unit costs
    calibrated just before it. Only the candidates auto has (:data:`AUTO_CANDIDATES`) count."""
    groups: dict[tuple, list] = defaultdict(list)
    for c in cells:
        if c.experiment in AUTO_SWEEPS and c.algorithm in AUTO_CANDIDATES and c.measured_over_predicted is not None:
            groups[(c.experiment, _label(c.setting))].append(c)
    choices = []
    for (experiment, setting), group in groups.items():
        if len(group) < 2:
            continue
        picked = max(group, key=_auto_prediction)
        best = max(group, key=lambda c: c.median)
        share = picked.median / best.median
        choices.append({"experiment": experiment, "setting": setting, "picked": picked.algorithm,
                        "picked_predicted": _auto_prediction(picked),
                        "picked_measured": picked.median, "best": best.algorithm, "best_measured": best.median,
                        "share_of_best": share, "good": share >= AUTO_WITHIN})
    return choices


def _auto_section(cells) -> list[str]:
    choices = auto_choices(cells)
    if not choices:
        return ["(no sweep setting measured two of auto's candidates)"]
    good = sum(c["good"] for c in choices)
    lines = [f"`auto` picked the measured best, or one within {1 - AUTO_WITHIN:.0%} of it, in {good} of {len(choices)} "
             f"settings of the skew and memory sweeps. It picks the highest prediction (a cache algorithm's with the "
             f"ideal p_N: auto chooses before the stream starts) among its candidates measured there "
             f"({', '.join(AUTO_CANDIDATES)}).", "",
             "| sweep | setting | auto picks (predicted) | measured | measured best | measured | picked / best |",
             "|---|---|---|---:|---|---:|---:|"]
    lines += [f"| {c['experiment']} | {c['setting']} | {c['picked']} ({c['picked_predicted']:,.0f}) | "
              f"{c['picked_measured']:,.0f} | {c['best']} | {c['best_measured']:,.0f} | {c['share_of_best']:.2f} |"
              for c in choices]
    return lines


def _model_section(modelled: list) -> list[str]:
    """The model table: each modelled cell's rate measured and predicted, and its iteration
    measured against the model's (tuples and milliseconds an iteration, the medians over the
    repeats): a rate off by its tuples has the wrong w (which pages a load serves), one off by
    its milliseconds the wrong c_loop (what a load or a step costs); the joining thread's CPU
    milliseconds against the model's c_loop without its I/O tell which term of c_loop."""
    inside = sum(LOW <= c.measured_over_predicted <= HIGH for c in modelled)
    lines = [f"{inside} of {len(modelled)} modelled cells within {LOW}-{HIGH}. A cache algorithm's prediction is at "
             "the hit ratio measured; its prediction with the ideal p_N follows. An iteration is a step of the "
             "algorithm (SSIJ's model: a cycle); where the rates disagree, its tuples measured / modelled tell a "
             "wrong w from a wrong cost of the iteration (its ms measured / modelled), and the joining thread's CPU ms "
             "against the model's ms without I/O a wrong CPU term from a wrong I/O term (the thread's CPU holds the "
             "client's side of the reads it makes itself, turning rows into columns, which the model prices in T; "
             "HYBRIDJOIN's read-ahead makes its loads on another thread, while the join works).", "",
             "| experiment | algorithm | setting | measured | predicted | measured / predicted "
             "| predicted with ideal p_N | tuples an iteration, measured / modelled | ms an iteration, measured / modelled "
             "| CPU ms an iteration, joining thread / model |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in modelled:
        it = c.iteration()
        tuples = f"{it['tuples']:,.0f} / {it['model_tuples']:,.0f}" if it else "-"
        ms = f"{it['ms']:.3g} / {it['model_ms']:.3g}" if it else "-"
        cpu = f"{it['cpu_ms']:.3g} / {it['model_cpu_ms']:.3g}" if it and "cpu_ms" in it else "-"
        lines.append(f"| {c.experiment} | {c.algorithm} | {_label(c.setting)} | {c.median:,.0f} | {c.predicted_tps:,.0f} | "
                     f"{c.measured_over_predicted:.2f} | "
                     f"{f'{c.predicted_ideal_tps:,.0f}' if c.predicted_ideal_tps else '-'} | {tuples} | {ms} | {cpu} |")
    return lines


def calibrated_per(scale_settings: dict) -> str:
    """What a run calibrated the unit costs anew for: each "repeat" of a cell, each "cell" (runs
    before 2026-11-29, whose settings say ``calibrate_each_cell``) or each "experiment"."""
    if "calibrate_per" in scale_settings:
        return scale_settings["calibrate_per"]
    return "cell" if scale_settings.get("calibrate_each_cell") else "experiment"


def calibration_line(cells, runs: int, per: str) -> str:
    """How the models' unit costs were calibrated (anew for each ``per``), how far the cells'
    calibrations spread, and their median (each cell keeps its last repeat's in ``results.json``)."""
    found = [ComponentCosts(**c.costs) for c in cells if c.costs]
    if not found:
        return "Unit costs of the models: none calibrated (no cell has a model)."
    spread = ", ".join(
        f"{label} {min(values):.3g}-{max(values):.3g} {unit}"
        for label, unit, values in (
            ("S", "ms", [c.query_s * 1e3 for c in found]), ("T", "us/row", [c.row_s * 1e6 for c in found]),
            ("step", "us", [c.c_step * 1e6 for c in found])))
    repeats = " A cell's prediction is the median of its repeats', each on its own calibration." if per == "repeat" else ""
    return (f"Unit costs of the models, calibrated before each {per}, the median of {runs} calibrations (S and T from "
            f"range loads, the IN cost a leaf from IN queries, at random places of R); over the {len(found)} cells: "
            f"{spread}; the median of the cells' costs: {costs_line(ComponentCosts.median(found))}.{repeats}")


def write_report(folder: Path, summary: dict, cells) -> dict[str, dict]:
    """Write ``README.md`` and the plots; returns :func:`plots`' account of them."""
    images = plots(folder, cells)
    s = summary["scale_settings"]
    lines = [
        f"# Reproduction of the papers' experiments ({summary['scale']} scale)",
        "",
        f"Command: `semijoin reproduce --scale {summary['scale']} --master {summary['master']} --out <this folder>`; "
        f"{summary['seconds']} s on {summary['machine']['platform']} ({summary['machine']['processor']}, "
        f"Python {summary['machine']['python']}), code {summary.get('code', 'not recorded')}."
        + (f" The report was written again from its results.json by code {summary['report_code']} "
           "(`--report-only`)." if summary.get("report_code") else ""),
        "",
        f"R = {s['rows']:,} rows ({summary['r_bytes']:,} bytes loaded), default memory {s['memory']:,} bytes, "
        f"warm-up {s['warmup_s']} s"
        + (f" and until the tuples held (H_S) turned over {s['warmup_turnovers']:g} times" if s.get("warmup_turnovers") else "")
        + f", window {s['window_s']} s per measurement, {s['repeats']} repetitions per "
        "cell: each cell is the median service rate in tuples/s with [min-max]. Compare within this run: "
        "the machine is shared, absolute rates move."
        + (" At the small scale a measurement lasts a fraction of a second, mostly a transient (H_S filling): the "
           "small scale checks the machinery; the verdicts that count are the standard run's."
           if summary["scale"] == "small" else ""),
        "",
        calibration_line(cells, summary["calibration_runs"], calibrated_per(s)),
        "",
        "## Claims of the papers",
        "",
        "| claim | paper, where | verdict | measured |",
        "|---|---|---|---|",
    ]
    for v in summary["claims"]:
        lines.append(f"| {v['claim']} | {v['paper']}, {v['where']} | {v['verdict']} | {v['measured']} |")
    titles = {"skew": "Service rate vs skew", "memory": "Service rate vs memory", "pq_vs_l": "-PQ vs -L",
              "ssij": "SSIJ vs MESHJOIN and HYBRIDJOIN", "policy": "SSIJ cache policy",
              "max_scan": "SSIJ maxScan", "temporal": "Temporal locality",
              "dbms": "SSIJ vs the DBMS's own index join", "model": "Predicted vs measured"}
    for experiment, title in titles.items():
        lines += ["", f"## {title}", ""]
        if experiment in images:
            lines += [f"![{title}]({images[experiment]['file']})", ""]
        if experiment == "pq_vs_l":
            rows = _pq_over_l(cells)
            lines += ["| family | skew | -PQ / -L median [min-max] |", "|---|---:|---:|"]
            lines += [f"| {r['family']} | {r['skew']:g} | {r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}] |" for r in rows]
        elif experiment == "model":
            lines += _model_section([c for c in cells if c.measured_over_predicted is not None])
        else:
            group = _cells(cells, experiment)
            lines += _table(group) if group else ["(not run)"]
    lines += ["", "## `algorithm: auto`", "", *_auto_section(cells)]
    (folder / "README.md").write_text("\n".join(lines) + "\n")
    return images
