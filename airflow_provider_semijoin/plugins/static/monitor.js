/* Semi-join monitor: shared helpers and a small SVG time-series chart (no dependencies).
 *
 * Everything that comes from the server is put into the page as text (textContent, SVG text
 * nodes), never as HTML: DAG ids, run ids and parameters are user data.
 */
"use strict";

const SJ = (() => {
  const SVG_NS = "http://www.w3.org/2000/svg";

  /** An element: h("td", {class: "num"}, "text", childNode, ...). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) el.setAttribute(name, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  function svg(tag, attrs) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs || {})) el.setAttribute(name, value);
    return el;
  }

  const isNum = (v) => typeof v === "number" && Number.isFinite(v);

  function count(v) {
    return isNum(v) ? Math.round(v).toLocaleString("en-US") : "–";
  }

  function compact(v) {
    if (!isNum(v)) return "–";
    const a = Math.abs(v);
    const trim = (text) => text.replace(/\.0+$|(\.\d*?)0+$/, "$1");
    if (a >= 1e9) return trim((v / 1e9).toFixed(2)) + " G";
    if (a >= 1e6) return trim((v / 1e6).toFixed(2)) + " M";
    if (a >= 1e4) return trim((v / 1e3).toFixed(1)) + " k";
    if (a >= 100 || Number.isInteger(v)) return Math.round(v).toLocaleString("en-US");
    return trim(v.toPrecision(3));
  }

  const fmt = {
    count,
    compact,
    rate: (v) => (isNum(v) ? compact(v) + " tuples/s" : "–"),
    perSecond: (v) => (isNum(v) ? compact(v) + " /s" : "–"),
    ms: (v) => (!isNum(v) ? "–" : v === 0 ? "0" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toPrecision(3) + " ms"),
    ratio: (v) => (isNum(v) ? (100 * v).toFixed(1) + " %" : "–"),
    bytes: (v) => {
      if (!isNum(v)) return "–";
      if (v >= 2 ** 30) return (v / 2 ** 30).toFixed(2) + " GiB";
      if (v >= 2 ** 20) return (v / 2 ** 20).toFixed(2) + " MiB";
      if (v >= 2 ** 10) return (v / 2 ** 10).toFixed(1) + " KiB";
      return v + " B";
    },
    /** Epoch seconds or an ISO string -> "HH:MM:SS" (UTC, like Airflow's default). */
    clock: (t) => {
      if (t === null || t === undefined) return "–";
      const d = typeof t === "number" ? new Date(t * 1000) : new Date(t);
      return Number.isNaN(d.getTime()) ? "–" : d.toISOString().slice(11, 19);
    },
    ago: (t, now) => {
      if (!isNum(t)) return "–";
      const s = Math.max(0, now - t);
      if (s < 90) return Math.round(s) + " s ago";
      if (s < 5400) return Math.round(s / 60) + " min ago";
      return (s / 3600).toFixed(1) + " h ago";
    },
  };

  /** GET a JSON endpoint; throws an Error whose message says what the server answered. */
  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) {
      let detail = response.statusText;
      try {
        detail = (await response.json()).detail || detail;
      } catch (_) {
        /* not JSON */
      }
      const error = new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  /** A colored badge with an Airflow task state. */
  function stateBadge(state) {
    const name = state || "none";
    return h("span", { class: "badge state-" + name.replace(/[^a-z_]/g, "") }, name.replace(/_/g, " "));
  }

  /** A task instance's page in Airflow's UI, from a page of the monitor (/semijoin/ui/...). */
  function airflowPage(ti) {
    const parts = ["dags", ti.dag_id, "runs", ti.run_id, "tasks", ti.task_id].map(encodeURIComponent);
    if (ti.map_index >= 0) parts.push("mapped", String(ti.map_index));
    return "../../" + parts.join("/");
  }

  /** Runs ``tick`` now and then every ``ms`` while it returns true; pauses in hidden tabs. */
  function poll(ms, tick) {
    let timer = null;
    async function run() {
      timer = null;
      let again = true;
      try {
        again = await tick();
      } catch (error) {
        console.error(error);
      }
      if (again) timer = setTimeout(run, document.hidden ? ms * 4 : ms);
    }
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && timer !== null) {
        clearTimeout(timer);
        run();
      }
    });
    run();
  }

  /** Axis top and tick step for values up to ``max``: steps of 1, 2, 2.5 or 5 x 10^k, 2 to 5 of them. */
  function niceScale(max) {
    if (!(max > 0)) return { top: 1, step: 0.25 };
    const rough = max / 4;
    const power = 10 ** Math.floor(Math.log10(rough));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((candidate) => candidate >= rough);
    return { top: Math.ceil(max / step - 1e-9) * step, step };
  }

  /**
   * A time-series chart: x = the history's ``time`` column (epoch seconds), one line or bar
   * series per entry of ``series`` ({key, label, cls}). ``update(columns)`` redraws from the
   * history columns; the element's data-points / data-last attributes say what is drawn.
   */
  class Chart {
    constructor(el, { title, series, format, yMax = null, bars = false, empty = "No data yet.", total = null }) {
      Object.assign(this, { el, series, format, yMax, bars, empty, total });
      this.value = h("span", { class: "chart-value" });
      this.legend = h(
        "div",
        { class: "chart-legend" },
        series.length > 1 ? series.map((s) => h("span", { class: "key " + s.cls }, s.label)) : null
      );
      this.plot = h("div", { class: "chart-plot" });
      this.tip = h("div", { class: "chart-tip", hidden: true });
      el.classList.add("chart");
      el.append(h("div", { class: "chart-head" }, h("h3", {}, title), this.value), this.legend, this.plot, this.tip);
      this.columns = null;
      new ResizeObserver(() => this.columns && this.draw()).observe(this.plot);
    }

    update(columns) {
      this.columns = columns;
      this.draw();
    }

    draw() {
      const cols = this.columns;
      const time = cols.time || [];
      const idx = time.map((t, i) => i).filter((i) => isNum(time[i]) && this.series.some((s) => isNum((cols[s.key] || [])[i])));
      const last = idx.length ? idx[idx.length - 1] : null;
      this.el.dataset.points = String(idx.length);
      this.el.dataset.last = last === null ? "" : JSON.stringify(this.series.map((s) => cols[s.key][last]));
      this.value.textContent =
        last === null ? "" : this.series.map((s) => this.format(cols[s.key][last])).join(" / ") + (this.total ? "  ·  " + this.total(cols) : "");
      this.plot.replaceChildren();
      if (!idx.length) {
        this.plot.append(h("p", { class: "chart-empty" }, this.empty));
        return;
      }
      const width = Math.max(240, this.plot.clientWidth || 480);
      const height = 170;
      const m = { left: 58, right: 10, top: 8, bottom: 22 };
      const w = width - m.left - m.right;
      const ht = height - m.top - m.bottom;
      let t0 = time[idx[0]];
      let t1 = time[last];
      if (t1 - t0 < 1) {
        t0 -= 1;
        t1 += 1;
      }
      let top = 0;
      for (const s of this.series) for (const i of idx) if (isNum(cols[s.key][i])) top = Math.max(top, cols[s.key][i]);
      const scale = niceScale(this.yMax === null ? top : this.yMax);
      const ymax = scale.top;
      const barWidth = Math.max(1.5, Math.min(14, (w / Math.max(idx.length, 1)) * 0.6));
      const pad = this.bars ? barWidth : 0; // keeps the first and last bars inside the plot
      const x = (t) => m.left + pad + ((t - t0) / (t1 - t0)) * (w - 2 * pad);
      const y = (v) => m.top + ht - (Math.min(v, ymax) / ymax) * ht;
      const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
      for (let k = 0; k * scale.step <= ymax + 1e-9; k++) {
        const v = k * scale.step;
        root.append(svg("line", { class: "grid", x1: m.left, x2: width - m.right, y1: y(v), y2: y(v) }));
        const label = svg("text", { class: "tick", x: m.left - 6, y: y(v) + 4, "text-anchor": "end" });
        label.textContent = this.format(v);
        root.append(label);
      }
      for (const [t, anchor] of [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]]) {
        const label = svg("text", { class: "tick", x: x(t), y: height - 6, "text-anchor": anchor });
        label.textContent = fmt.clock(t);
        root.append(label);
      }
      for (const s of this.series) {
        const values = cols[s.key] || [];
        if (this.bars) {
          for (const i of idx) {
            if (!isNum(values[i])) continue;
            const top = y(values[i]);
            root.append(svg("rect", { class: "bar " + s.cls, x: x(time[i]) - barWidth / 2, y: top, width: barWidth, height: Math.max(0, m.top + ht - top) }));
          }
          continue;
        }
        let d = "";
        let pen = "M";
        for (const i of idx) {
          if (!isNum(values[i])) {
            pen = "M";
            continue;
          }
          d += `${pen}${x(time[i]).toFixed(1)},${y(values[i]).toFixed(1)}`;
          pen = "L";
        }
        root.append(svg("path", { class: "line " + s.cls, d }));
        if (idx.length <= 120) {
          for (const i of idx) if (isNum(values[i])) root.append(svg("circle", { class: "dot " + s.cls, cx: x(time[i]), cy: y(values[i]), r: 2.5 }));
        }
      }
      const cursor = svg("line", { class: "cursor", y1: m.top, y2: m.top + ht, visibility: "hidden" });
      const overlay = svg("rect", { class: "overlay", x: m.left, y: m.top, width: w, height: ht });
      overlay.addEventListener("mousemove", (event) => {
        const box = root.getBoundingClientRect();
        const t = t0 + ((event.clientX - box.left - m.left) / w) * (t1 - t0);
        let best = idx[0];
        for (const i of idx) if (Math.abs(time[i] - t) < Math.abs(time[best] - t)) best = i;
        cursor.setAttribute("x1", x(time[best]));
        cursor.setAttribute("x2", x(time[best]));
        cursor.setAttribute("visibility", "visible");
        const batch = (cols.batch_id || [])[best];
        this.tip.replaceChildren(
          h("div", {}, `${fmt.clock(time[best])}${isNum(batch) ? "  batch " + batch : ""}`),
          ...this.series.map((s) => h("div", { class: "key " + s.cls }, `${s.label}: ${this.format(cols[s.key][best])}`))
        );
        this.tip.hidden = false;
        this.tip.style.left = Math.min(x(time[best]) + 12, width - 150) + "px";
      });
      overlay.addEventListener("mouseleave", () => {
        cursor.setAttribute("visibility", "hidden");
        this.tip.hidden = true;
      });
      root.append(cursor, overlay);
      this.plot.append(root);
    }
  }

  return { h, fmt, getJSON, stateBadge, airflowPage, poll, Chart, isNum };
})();
