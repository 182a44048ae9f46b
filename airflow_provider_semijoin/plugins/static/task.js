/* The live page of one semi-join task instance: charts of its progress history, refreshed
 * every few seconds while the task runs, and the algorithm's parameters and memory split. */
"use strict";

(() => {
  const { h, fmt, getJSON, stateBadge, poll, airflowPage, Chart, isNum } = SJ;
  const REFRESH_MS = 3000;
  const query = new URLSearchParams(location.search);
  const $ = (id) => document.getElementById(id);
  const lastOf = (values) => (values && values.length ? values[values.length - 1] : null);
  const totalOf = (key) => (cols) => "total " + fmt.count(lastOf(cols[key]));

  const charts = [
    ["chart-rate", { title: "Service rate (tuples/s)", series: [{ key: "service_rate_tps", label: "tuples/s", cls: "s1" }], format: fmt.compact }],
    [
      "chart-latency",
      {
        title: "End-to-end latency",
        series: [
          { key: "latency_ms_p50", label: "p50", cls: "s1" },
          { key: "latency_ms_p99", label: "p99", cls: "s2" },
        ],
        format: fmt.ms,
        empty: "No latency reported yet.",
      },
    ],
    [
      "chart-cache",
      {
        title: "Cache hit ratio",
        series: [{ key: "cache_hit_ratio", label: "hit ratio", cls: "s1" }],
        format: fmt.ratio,
        yMax: 1,
        empty: "This algorithm keeps no cache of master rows: no hit ratio to show.",
      },
    ],
    ["chart-queue", { title: "Queue / stream buffer (tuples)", series: [{ key: "peak_queue_tuples", label: "tuples", cls: "s1" }], format: fmt.compact }],
    ["chart-disk", { title: "Disk queries per second", series: [{ key: "disk_queries_per_s", label: "queries/s", cls: "s1" }], format: fmt.compact }],
    [
      "chart-deadline",
      { title: "Deadline misses per micro-batch", series: [{ key: "deadline_misses", label: "misses", cls: "s3" }], format: fmt.compact, bars: true, total: totalOf("total_deadline_misses") },
    ],
    [
      "chart-unmatched",
      { title: "Unmatched tuples per micro-batch", series: [{ key: "unmatched", label: "unmatched", cls: "s4" }], format: fmt.compact, bars: true, total: totalOf("total_unmatched") },
    ],
  ].map(([id, options]) => new Chart($(id), options));

  function header(d) {
    const algorithm = (d.info && d.info.algorithm) || (d.latest && d.latest.algorithm);
    $("algorithm").textContent = algorithm ? algorithm.toUpperCase() : "Semi-join";
    $("state").replaceChildren(stateBadge(d.state));
    $("paper").textContent = (d.info && d.info.paper) || "";
    const link = $("airflow-link");
    link.textContent = `${d.dag_id} › ${d.run_id} › ${d.task_id}${d.map_index >= 0 ? " [" + d.map_index + "]" : ""}`;
    link.href = airflowPage(d);
    document.title = `${algorithm || "Semi-join"} · ${d.task_id}`;
  }

  function showEmpty(title, text) {
    $("empty-title").textContent = title;
    $("empty-text").textContent = text;
    $("empty").hidden = false;
  }

  function kpis(d) {
    const r = d.latest;
    const cols = d.history.series;
    const tile = (label, value, note) => h("div", { class: "kpi" }, h("div", { class: "kpi-label" }, label), h("div", { class: "kpi-value" }, value), note ? h("div", { class: "kpi-note" }, note) : null);
    const reasons = Object.entries(r.unmatched_by_reason || {}).map(([k, v]) => `${k}: ${fmt.count(v)}`).join(", ");
    const tiles = [
      tile("Service rate", fmt.rate(r.service_rate_tps), `batch #${r.batch_id}: ${fmt.count(r.input_rows)} tuples in ${fmt.ms(1000 * r.batch_duration_s)}`),
      tile("Latency p50 / p99", `${fmt.ms(r.latency_ms_p50)} / ${fmt.ms(r.latency_ms_p99)}`, "arrival to output"),
      tile("Cache hit ratio", fmt.ratio(r.cache_hit_ratio), isNum(r.cache_entries) ? `${fmt.count(r.cache_entries)} entries` : null),
      tile("Queue", fmt.count(r.peak_queue_tuples), `${fmt.count(r.queue_tuples)} held after the batch`),
      tile("Disk queries", fmt.perSecond(lastOf(cols.disk_queries_per_s)), `${fmt.count(r.disk_queries)} queries, ${fmt.count(r.disk_rows)} rows in the batch`),
      tile("Deadline misses", fmt.count(r.total_deadline_misses), `${fmt.count(r.deadline_misses)} in the batch`),
      tile("Reconnects", fmt.count(r.total_reconnects || 0), `${fmt.ms(1000 * (r.total_reconnect_wait_s || 0))} waiting for the database`),
      tile("Unmatched", fmt.count(r.total_unmatched), reasons || null),
      tile("Input", fmt.count(r.total_input_rows), `${fmt.count(r.total_matched)} matched`),
      // the version of the master table each join step read in the batch (updates, SSIJ sec. IV-E)
      (r.master_versions || []).length ? tile("Master data version", r.master_versions.join(" / "),
        (r.master_staleness_s || []).some((s) => s !== null)
          ? `read by the last batch; newest ${r.master_staleness_s.map((s) => (s === null ? "?" : fmt.ms(1000 * s))).join(" / ")} before its end`
          : "read by the last batch") : null,
    ];
    $("kpis").replaceChildren(...tiles.filter(Boolean));
    $("kpis").hidden = false;
  }

  const show = (value) => (value !== null && typeof value === "object" ? JSON.stringify(value) : String(value));

  function details(info) {
    if (!info) return;
    const params = info.params || info.settings || {};
    const join = Object.entries(info).filter(([k, v]) => !["algorithm", "paper", "params", "settings", "memory_split"].includes(k) && v !== null);
    const rows = (entries, bytes) =>
      entries.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, bytes && k.endsWith("bytes") && isNum(v) ? fmt.bytes(v) : show(v))));
    $("params").replaceChildren(...rows(Object.entries(params), false), ...rows(join, true));
    if (!$("params").children.length) $("params").append(h("tr", {}, h("td", {}, "No parameters published.")));

    const split = info.memory_split || {};
    // leaves of the split: byte counts that are not a sub-budget (a budget is the sum of its parts)
    const parts = Object.entries(split).filter(([k, v]) => k.endsWith("bytes") && !k.includes("budget") && isNum(v) && v > 0);
    const used = parts.reduce((sum, [, v]) => sum + v, 0);
    const budget = isNum(info.memory_budget_bytes) ? info.memory_budget_bytes : used;
    const bar = $("memory-bar");
    bar.replaceChildren(
      ...parts.map(([k, v], i) =>
        h("div", { class: "seg m" + (i % 6), style: `width:${(100 * v) / Math.max(budget, used, 1)}%`, title: `${k}: ${fmt.bytes(v)}` }, k.replace(/_bytes$/, ""))
      )
    );
    bar.hidden = !parts.length;
    const budgetRow = isNum(budget) && budget > 0 ? [["budget", `${fmt.bytes(budget)} (${fmt.bytes(used)} in the structures below)`]] : [];
    $("memory").replaceChildren(...rows(budgetRow, false), ...rows(Object.entries(split), true));
    if (!$("memory").children.length) $("memory").append(h("tr", {}, h("td", {}, "No memory split published.")));
    $("details").hidden = false;
  }

  function render(d) {
    header(d);
    const points = d.history.points;
    ["banner", "empty", "kpis", "charts"].forEach((id) => ($(id).hidden = true));
    if (d.phase === "not_started") {
      showEmpty("This task has not started yet", `State: ${d.state || "none"}. Its live metrics appear here once the join runs its first micro-batch.`);
    } else if (d.phase === "waiting_first_batch") {
      const since = d.start_date ? ` since ${fmt.clock(d.start_date)} UTC` : "";
      showEmpty("Waiting for the first micro-batch", `The join is running${since}. Charts appear when its first micro-batch completes.`);
    } else if (!d.latest || points === 0) {
      showEmpty(`The task ended (${d.state}) before its first micro-batch`, "No progress was recorded for this try of the task.");
    }
    if (d.latest && points > 0) {
      kpis(d);
      charts.forEach((chart) => chart.update(d.history.series));
      $("charts").hidden = false;
      if (d.phase === "ended") {
        const banner = $("banner");
        banner.textContent = `The task ended (${d.state}) at ${fmt.clock(d.end_date)} UTC after ${fmt.count(d.latest.batch_id + 1)} micro-batches. The charts show its recorded history; this page no longer refreshes.`;
        banner.className = "banner state-" + d.state;
        banner.hidden = false;
      }
    }
    details(d.info);
    $("footer").textContent = `History: ${points} micro-batch record(s) kept in Airflow's metadata database (XCom semijoin_history, at most 600 points over the last hour).`;
  }

  poll(REFRESH_MS, async () => {
    const status = $("status");
    try {
      const d = await getJSON("../api/task?" + query);
      render(d);
      const last = d.latest ? `last micro-batch #${d.latest.batch_id} at ${fmt.clock(d.latest.time)} UTC · ` : "";
      status.textContent = d.live ? `${last}updated ${fmt.clock(d.now)} UTC · refreshes every ${REFRESH_MS / 1000} s` : `${last}not refreshing: the task ended`;
      status.classList.remove("error");
      return d.live;
    } catch (error) {
      status.textContent = `Could not load this task's metrics: ${error.message}`;
      status.classList.add("error");
      if (error.status === 403 || error.status === 404 || error.status === 422) {
        showEmpty(error.status === 403 ? "No access" : "No such task instance", error.message);
        return false;
      }
      return true;
    }
  });
})();
