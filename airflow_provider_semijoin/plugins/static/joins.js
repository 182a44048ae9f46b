/* The list page: running and recently ended semi-join tasks, refreshed every few seconds. */
"use strict";

(() => {
  const { h, fmt, getJSON, stateBadge, poll, airflowPage } = SJ;
  const REFRESH_MS = 5000;
  const params = new URLSearchParams(location.search);
  const hours = params.get("hours") || "24";
  const body = document.getElementById("joins");
  const status = document.getElementById("status");
  const empty = document.getElementById("empty");
  document.getElementById("window").textContent = hours;

  /** The task's live page relative to this one (so it also works when Airflow runs under a base path). */
  const relativePage = (j) => "task" + new URL(j.page, location.href).search;

  function row(j, now) {
    const task = j.map_index >= 0 ? `${j.task_id} [${j.map_index}]` : j.task_id;
    return h(
      "tr",
      { "data-task": `${j.dag_id}/${j.run_id}/${j.task_id}/${j.map_index}`, "data-state": j.state || "none" },
      h("td", {}, h("a", { href: airflowPage(j), target: "_top", title: "open in Airflow" }, j.dag_id)),
      h("td", { class: "run" }, j.run_id),
      h("td", {}, h("a", { href: "task" + new URL(j.page, location.href).search, // relative: works under a base path
         class: "task-link", title: "live metrics" }, task)),
      h("td", {}, j.algorithm || "–"),
      h("td", {}, stateBadge(j.state)),
      h("td", { class: "num" }, fmt.rate(j.service_rate_tps)),
      h("td", { class: "num" }, fmt.ms(j.latency_ms_p99)),
      h("td", { class: "num" + (j.deadline_misses > 0 ? " warn" : "") }, fmt.count(j.deadline_misses)),
      h("td", { class: "num" }, fmt.count(j.unmatched)),
      h("td", { class: "num" }, fmt.count(j.input_rows)),
      h("td", { class: "num" }, j.batch_id === null || j.batch_id === undefined ? "no batch yet" : `#${j.batch_id}, ${fmt.ago(j.updated_at, now)}`)
    );
  }

  poll(REFRESH_MS, async () => {
    try {
      const data = await getJSON("../api/joins?" + new URLSearchParams({ hours }));
      const now = Date.parse(data.now) / 1000;
      body.replaceChildren(...data.joins.map((j) => row(j, now)));
      empty.hidden = data.joins.length > 0;
      const running = data.joins.filter((j) => j.state === "running").length;
      status.textContent = `${data.joins.length} task(s), ${running} running · updated ${fmt.clock(data.now)} UTC · refreshes every ${REFRESH_MS / 1000} s`;
      status.classList.remove("error");
    } catch (error) {
      status.textContent = `Could not load the semi-join tasks: ${error.message}`;
      status.classList.add("error");
    }
    return true;
  });
})();
