// The .onnx document viewer and the compare view: the notebook's graph view (graph.js) driven by a local model
// instead of a kernel, with the data from onnx-nb's server extension (labserver.py). Every text that came from
// a file is set with textContent: a hostile name shows as text, never as markup.
import { URLExt } from "@jupyterlab/coreutils";
import { ServerConnection } from "@jupyterlab/services";
import { Widget } from "@lumino/widgets";

import { el } from "../dom.js";
import graphView from "../graph.js";

// What graph.js needs of an anywidget model: get, set (which tells the listeners), on, save_changes.
export class LocalModel {
  constructor(state) {
    this.state = { ...state };
    this.listeners = {};
  }
  get(key) { return this.state[key]; }
  set(key, value) {
    this.state[key] = value;
    for (const f of this.listeners[`change:${key}`] || []) f();
  }
  on(event, f) { (this.listeners[event] = this.listeners[event] || []).push(f); }
  save_changes() {}
}

export async function api(route, params, body) {
  const settings = ServerConnection.makeSettings();
  const query = params ? "?" + new URLSearchParams(params).toString() : "";
  const url = URLExt.join(settings.baseUrl, "onnx-nb", "api", route) + query;
  const init = body === undefined ? {} : { method: "POST", body: JSON.stringify(body) };
  const response = await ServerConnection.makeRequest(url, init, settings);
  let data;
  try {
    data = await response.json();
  } catch (e) {
    throw new Error(`The server answered ${response.status} without data.`);
  }
  if (!response.ok || data.error) throw new Error(data.error || `The server answered ${response.status}.`);
  return data;
}

const fmt = (n) => {
  if (n === undefined || n === null) return "-";
  for (const [u, d] of [["T", 1e12], ["G", 1e9], ["M", 1e6], ["K", 1e3]]) if (n >= d) return (n / d).toFixed(1) + u;
  return String(n);
};
const bytes = (n) => {
  for (const [u, d] of [["GB", 2 ** 30], ["MB", 2 ** 20], ["KB", 2 ** 10]]) if (n >= d) return (n / d).toFixed(1) + " " + u;
  return `${n} B`;
};
const shapeText = (dims) => `[${dims.join(", ")}]`;

function table(parent, headers, rows, cls) {
  const t = el("table", `onnxnb-lab-table ${cls || ""}`, parent);
  if (headers) {
    const tr = el("tr", "", el("thead", "", t));
    for (const h of headers) el("th", "", tr, h);
  }
  const body = el("tbody", "", t);
  for (const r of rows) {
    const tr = el("tr", "", body);
    for (const c of r) el("td", "", tr, String(c));
  }
  return t;
}

function section(parent, title, open) {
  const d = el("details", "onnxnb-lab-section", parent);
  d.open = !!open;
  el("summary", "", d, title);
  return el("div", "onnxnb-lab-section-body", d);
}

// Search over node names, op types and tensor names; a hit jumps the graph to its node (over a compare pane, the
// hits close once one is picked: they lie over the drawing).
function searchBox(parent, graph, model, closeOnPick) {
  const box = el("div", "onnxnb-lab-search", parent);
  const input = el("input", "onnxnb-lab-search-input", box);
  input.placeholder = "Search nodes, op types, tensors…";
  const list = el("div", "onnxnb-lab-search-hits", box);
  input.addEventListener("input", () => {
    list.replaceChildren();
    const q = input.value.trim().toLowerCase();
    if (q.length < 2) return;
    const hits = [];
    for (const n of graph.nodes) {
      const why = n.name.toLowerCase().includes(q) ? "name" : n.op.toLowerCase() === q || n.op.toLowerCase().includes(q) ? "op"
        : [...n.inputs, ...n.outputs].find((t) => t.toLowerCase().includes(q)) ? "tensor" : "";
      if (why) hits.push([n, why]);
      if (hits.length >= 200) break;
    }
    el("div", "onnxnb-lab-search-count", list, `${hits.length}${hits.length >= 200 ? "+" : ""} match${hits.length === 1 ? "" : "es"}`);
    for (const [n, why] of hits.slice(0, 60)) {
      const row = el("div", "onnxnb-lab-search-hit", list, `${n.op} · ${n.name}`);
      row.title = `${why} match${n.module ? " · module " + n.module : ""}`;
      row.addEventListener("click", () => {
        model.set("goto", n.name);
        if (closeOnPick) list.replaceChildren();
      });
    }
  });
  return input;
}

// One graph pane: graph.js on a local model; clicking a node fetches its weight statistics from the server.
export function graphPane(parent, path, data, extra) {
  const host = el("div", "onnxnb-lab-graph", parent);
  const model = new LocalModel({
    graph: data.graph, overlay: (extra && extra.overlay) || {}, overlay_label: (extra && extra.overlay_label) || "",
    highlight: (extra && extra.highlight) || "", selected: "", details: {}, depth: data.depth, expanded: [],
    marks: (extra && extra.marks) || {}, goto: "",
  });
  model.on("change:selected", async () => {
    const name = model.get("selected");
    if (!name) return;
    try {
      const info = await api("details", { path, node: name });
      if (extra && extra.overlay && Object.hasOwn(extra.overlay, name)) info.overlay = extra.overlay[name];
      model.set("details", info);
    } catch (e) {
      model.set("details", { node: name, values: [String(e.message || e)] });
    }
  });
  model.cleanup = graphView.render({ model, el: host });
  return model;
}

export class OnnxViewer extends Widget {
  constructor(path) {
    super();
    this.path = path;
    this.started = performance.now();
    this.addClass("onnxnb-lab-viewer");
    this.title.label = path.split("/").pop();
    this.status = el("div", "onnxnb-lab-status", this.node, `Reading ${this.title.label}…`);
    this.load();
  }

  async load() {
    let data;
    try {
      data = await api("graph", { path: this.path });
    } catch (e) {
      this.status.className = "onnxnb-lab-status onnxnb-lab-error";
      this.status.textContent = `${this.title.label} cannot be shown: ${e.message || e}`;
      this.node.dataset.state = "error";
      return;
    }
    this.status.remove();
    if (!data.graph.nodes.length) {
      el("div", "onnxnb-lab-status", this.node, data.summary.nodes
        ? `${data.summary.nodes} nodes: too many to draw here; the summary below comes from the file.`
        : "This graph has no nodes.");
    }
    const main = el("div", "onnxnb-lab-main", this.node);
    const side = el("div", "onnxnb-lab-side", this.node);
    const o = data.overlay || {};
    this.model = graphPane(main, this.path, data, { overlay: o.values, overlay_label: o.label, highlight: o.highlight });
    this.side(side, data);
    // the selected node's details go to the side panel, under the search: the drawing keeps the tab's width
    const details = main.querySelector(".onnxnb-graph-details");
    if (details) side.insertBefore(details, side.children[1] || null);
    requestAnimationFrame(() => {
      this.node.dataset.state = "ready";
      this.node.dataset.readyMs = String(Math.round(performance.now() - this.started));
      this.node.dataset.serverSeconds = String(data.seconds);
    });
  }

  dispose() {
    disposeAll([this.model]);
    super.dispose();
  }

  side(side, data) {
    const s = data.summary;
    searchBox(section(side, "Search", true), data.graph, this.model);
    const over = section(side, "Model", true);
    const size = bytes(s.file_bytes) + (s.external_bytes ? ` + ${bytes(s.external_bytes)} external data` : "");
    table(over, null, [["file", s.path.split("/").pop()], ["size", size], ["parameters", fmt(s.params)],
      ["nodes", s.nodes], ["IR version", s.ir_version],
      ["opsets", Object.entries(s.opsets).map(([k, v]) => `${k} ${v}`).join(", ")], ["producer", s.producer || "-"]],
      "onnxnb-lab-overview");
    if (data.overlay && data.overlay.source) el("div", "onnxnb-lab-note", over, `overlay: ${data.overlay.label} from ${data.overlay.source}`);
    const io = section(side, "Inputs and outputs", true);
    table(io, ["", "name", "type", "shape"], [...s.inputs.map((i) => ["in", i.name, i.dtype, shapeText(i.shape)]),
      ...s.outputs.map((x) => ["out", x.name, x.dtype, shapeText(x.shape)])], "onnxnb-lab-io");
    const mods = section(side, "Parameters by module", false);
    const rows = Object.entries(s.modules).map(([m, v]) => [m, v.params]).filter((r) => r[1] > 0)
      .sort((a, b) => b[1] - a[1]);
    table(mods, ["module", "params"], rows.slice(0, 200).map(([m, p]) => [m, fmt(p)]), "onnxnb-lab-params");
    const ops = section(side, "Operators", false);
    const most = Math.max(1, ...Object.values(s.ops));
    for (const [op, n] of Object.entries(s.ops)) {
      const row = el("div", "onnxnb-lab-op", ops);
      el("span", "onnxnb-lab-op-name", row, op);
      const bar = el("span", "onnxnb-lab-op-bar", row);
      bar.style.width = `${Math.max(2, (120 * n) / most)}px`;
      el("span", "onnxnb-lab-op-count", row, String(n));
    }
    this.costForm(section(side, "Cost at shapes", true), data);
  }

  costForm(box, data) {
    const form = el("div", "onnxnb-lab-cost-form", box);
    const fields = {};
    for (const [axis, value] of Object.entries(data.axes)) {
      const label = el("label", "onnxnb-lab-axis", form, `${axis} `);
      const input = el("input", "onnxnb-lab-axis-input", label);
      input.type = "number";
      input.min = "0";
      input.value = String(value);
      input.dataset.axis = axis;
      fields[axis] = input;
    }
    const run = el("button", "onnxnb-lab-btn onnxnb-lab-cost-run", form, "Count");
    const out = el("div", "onnxnb-lab-cost-out", box);
    const count = async () => {
      const shapes = {};
      for (const [axis, input] of Object.entries(fields)) shapes[axis] = Number.parseInt(input.value, 10);
      out.textContent = "counting…";
      try {
        const r = await api("cost", null, { path: this.path, shapes });
        out.replaceChildren();
        const at = Object.entries(r.summary.shapes).map(([k, v]) => `${k} ${shapeText(v)}`).join(", ");
        el("div", "onnxnb-lab-cost-total", out, `${fmt(r.summary.macs)} MACs · ${fmt(r.summary.flops)} FLOPs · ${fmt(r.summary.params)} params`);
        el("div", "onnxnb-lab-note", out, `at ${at}`);
        table(out, ["module", "params", "MACs", "FLOPs"], r.by_module.map((m) => [m.module, fmt(m.params),
          fmt(m.macs || 0), fmt(m.flops || 0)]), "onnxnb-lab-cost-table");
        for (const n of r.summary.notes || []) el("div", "onnxnb-lab-note", out, n);
      } catch (e) {
        out.textContent = String(e.message || e);
        out.className = "onnxnb-lab-cost-out onnxnb-lab-error";
      }
    };
    run.addEventListener("click", count);
  }
}

const MARK_NAMES = ["same", "changed", "fused", "quantized", "added", "removed"];

function disposeAll(panes) {
  for (const m of panes || []) if (m.cleanup) m.cleanup();
}

// Two files side by side: marks from the server's matching, per-node error on the right when a report exists;
// clicking a node of one side centres its counterpart on the other.
export class CompareViewer extends Widget {
  constructor(a, b) {
    super();
    this.a = a;
    this.b = b;
    this.addClass("onnxnb-lab-compare");
    this.title.label = `${a.split("/").pop()} ↔ ${b.split("/").pop()}`;
    this.title.closable = true;
    this.status = el("div", "onnxnb-lab-status", this.node, "Comparing…");
    this.load();
  }

  dispose() {
    disposeAll(this.panes);
    super.dispose();
  }

  async load() {
    let data;
    try {
      data = await api("compare", { a: this.a, b: this.b });
    } catch (e) {
      this.status.className = "onnxnb-lab-status onnxnb-lab-error";
      this.status.textContent = `These files cannot be compared: ${e.message || e}`;
      this.node.dataset.state = "error";
      return;
    }
    this.status.remove();
    const head = el("div", "onnxnb-lab-compare-head", this.node);
    for (const m of MARK_NAMES) {
      const c = Object.hasOwn(data.counts, m) ? data.counts[m] : null;
      if (!c) continue;
      const chip = el("span", `onnxnb-lab-chip onnxnb-chip-${m}`, head, `${m}: ${c[0]} → ${c[1]}`);
      chip.title = `${c[0]} nodes of ${this.a} and ${c[1]} of ${this.b} are ${m}`;
    }
    if (data.error_label) el("span", "onnxnb-lab-note", head, `right: ${data.error_label}`);
    for (const n of data.notes || []) el("span", "onnxnb-lab-note", head, n);
    const panes = el("div", "onnxnb-lab-compare-panes", this.node);
    const left = el("div", "onnxnb-lab-compare-pane", panes);
    const right = el("div", "onnxnb-lab-compare-pane", panes);
    el("div", "onnxnb-lab-pane-title", left, this.a);
    el("div", "onnxnb-lab-pane-title", right, this.b);
    // a search above each side: a node found by name on one side opens its counterpart on the other
    const finds = [el("div", "onnxnb-lab-pane-search", left), el("div", "onnxnb-lab-pane-search", right)];
    const ma = graphPane(left, this.a, data.a, { marks: data.marks_a });
    const mb = graphPane(right, this.b, data.b, { marks: data.marks_b, overlay: data.errors, overlay_label: data.error_label });
    this.panes = [ma, mb];
    searchBox(finds[0], data.a.graph, ma, true);
    searchBox(finds[1], data.b.graph, mb, true);
    const forth = new Map([...Object.entries(data.into), ...Object.entries(data.matched)]);
    const back = new Map(Object.entries(data.matched).map(([x, y]) => [y, x]));
    let syncing = false;  // one side's jump selects a node there: it must not jump the first side back
    const follow = (from, to, map) => from.on("change:selected", () => {
      const other = map.get(from.get("selected"));
      if (syncing || !other || to.get("selected") === other) return;
      syncing = true;
      try { to.set("goto", other); } finally { syncing = false; }
    });
    follow(ma, mb, forth);
    follow(mb, ma, back);
    this.node.dataset.state = "ready";
  }
}
