// onnx-nb graph view: an ONNX graph drawn in the notebook, no server needed.
// Layout by dagre; pan (drag) and zoom (wheel); nodes grouped by PyTorch module scope (click a group to
// expand it); overlays colour nodes by a per-node value (parity error, profile time, quantization error);
// clicking a node asks Python for its details (attributes, shapes, values summary). Labels follow the zoom
// (hidden below 10 px on screen, shown on hover); "go to" buttons jump to the diverging or the costliest node.
import dagre from "@dagrejs/dagre";

import { el } from "./dom.js";

const SVGNS = "http://www.w3.org/2000/svg";
const MAX_LABEL = 28;

function svg(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}


function short(s) {
  return s.length > MAX_LABEL ? s.slice(0, MAX_LABEL - 1) + "…" : s;
}

const TOP = "(top level)";
const MAX_LOOSE = 20;
const CHUNK = 100;
// compare view: what became of each node (fill and border per mark)
const MARK_STYLE = {
  fused: ["#efe3fb", "#7b1fa2"], quantized: ["#fff1dc", "#c26401"], added: ["#e3f5e6", "#188038"],
  removed: ["#fde7e7", "#b3261e"], changed: ["#fff8c5", "#8a6d00"],
};

// The visible unit a node belongs to: a collapsed module group, or the node itself. Operators outside
// any module (shape arithmetic, weight copies) are gathered in one group when there are many.
function unitOf(node, depth, expanded, manyLoose, index) {
  const mod = node.module;
  if (!mod) {
    if (!manyLoose || depth <= 0) return null;
    if (!expanded.has(TOP)) return TOP;
    // a graph with no module scopes (a downloaded file): its operators in runs of CHUNK, in graph order, so that
    // thousands of them never land in one layout
    if (manyLoose > CHUNK) {
      const k = Math.floor(index / CHUNK);
      const chunk = `${TOP} ${k * CHUNK + 1}–${Math.min((k + 1) * CHUNK, manyLoose)}`;
      if (!expanded.has(chunk)) return chunk;
    }
    return null;
  }
  if (depth <= 0) return null;
  const parts = mod.split(".");
  for (let d = Math.min(depth, parts.length); d <= parts.length; d++) {
    const prefix = parts.slice(0, d).join(".");
    if (!expanded.has(prefix)) return prefix;
  }
  return null;
}

function colour(value, lo, hi) {
  if (value === undefined || value === null || !isFinite(value)) return null;
  const v = Math.max(value, lo);
  const t = hi > lo ? (Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)) : 1;
  const c = Math.min(Math.max(t, 0), 1);
  const r = 255, g = Math.round(245 - 180 * c), b = Math.round(230 - 210 * c);
  return `rgb(${r},${g},${b})`;
}

function buildVisible(graph, depth, expanded, overlay, marks) {
  const units = new Map();
  const unitOfNode = new Map();
  const looseCount = graph.nodes.filter((n) => !n.module).length;
  const manyLoose = looseCount > MAX_LOOSE ? looseCount : 0;
  let looseIndex = 0;
  for (const n of graph.nodes) {
    const g = unitOf(n, depth, expanded, manyLoose, n.module ? 0 : looseIndex++);
    const id = g === null ? "n:" + n.name : "g:" + g;
    unitOfNode.set(n.name, id);
    if (!units.has(id)) {
      units.set(id, g === null
        ? { id, kind: "node", label: n.op, sub: short(n.name), node: n, members: [n.name] }
        : { id, kind: "group", label: short(g), sub: "", prefix: g, members: [], ops: {} });
    }
    const u = units.get(id);
    if (u.kind === "group") {
      u.members.push(n.name);
      u.ops[n.op] = (u.ops[n.op] || 0) + 1;
    }
  }
  for (const u of units.values()) {
    if (u.kind === "group") u.sub = `${u.members.length} op${u.members.length === 1 ? "" : "s"}`;
    const vals = u.members.map((m) => (Object.hasOwn(overlay, m) ? overlay[m] : undefined))
      .filter((v) => typeof v === "number" && isFinite(v));
    u.value = vals.length ? Math.max(...vals) : undefined;
    // the mark a box shows: its node's, or for a group the commonest mark other than "same" among its members
    // (own keys only, and only known marks: a node may be called "toString")
    const markOf = (m) => (Object.hasOwn(marks, m) && (Object.hasOwn(MARK_STYLE, marks[m]) || marks[m] === "same")
      ? marks[m] : "");
    const counts = {};
    for (const m of u.members) {
      const k = markOf(m);
      if (k && k !== "same") counts[k] = (counts[k] || 0) + 1;
    }
    const top = Object.entries(counts).sort((a, b) => b[1] - a[1])[0];
    u.mark = top ? top[0] : (u.members.some((m) => markOf(m) === "same") ? "same" : "");
    u.markCount = top ? top[1] : 0;
  }
  const edges = new Map();
  for (const e of graph.edges) {
    const a = unitOfNode.get(e.source), b = unitOfNode.get(e.target);
    if (!a || !b || a === b) continue;
    edges.set(a + "->" + b, { source: a, target: b });
  }
  return { units: [...units.values()], edges: [...edges.values()], unitOfNode };
}

function render({ model, el: root }) {
  root.classList.add("onnxnb-graph");
  const toolbar = el("div", "onnxnb-graph-toolbar", root);
  const title = el("span", "onnxnb-graph-title", toolbar);
  const less = el("button", "onnxnb-graph-btn onnxnb-graph-collapse", toolbar, "− scope");
  const more = el("button", "onnxnb-graph-btn onnxnb-graph-expand", toolbar, "+ scope");
  const fit = el("button", "onnxnb-graph-btn onnxnb-graph-fit", toolbar, "fit");
  const toHighlight = el("button", "onnxnb-graph-btn onnxnb-graph-goto-highlight", toolbar, "go to diverging node");
  const toTop = el("button", "onnxnb-graph-btn onnxnb-graph-goto-top", toolbar, "go to max");
  const legend = el("span", "onnxnb-graph-legend", toolbar);
  const body = el("div", "onnxnb-graph-body", root);
  const canvas = svg("svg", { class: "onnxnb-graph-svg", width: "100%", height: "100%" }, body);
  const view = svg("g", { class: "onnxnb-graph-viewport" }, canvas);
  const details = el("div", "onnxnb-graph-details", body);
  details.textContent = "Click a node for its details; click a module group to expand it.";
  const hover = el("div", "onnxnb-graph-hover", body);
  let expanded = new Set(model.get("expanded") || []);
  let t = { x: 20, y: 20, k: 1 };
  let bbox = { width: 1, height: 1 };
  let placed = new Map();  // unit id -> its box in graph coordinates, from the last layout
  let unitOfNode = new Map();

  // Level of detail: a label shows only while it is at least 10 px high on screen (a text's box is a little
  // under its font size, so the font must reach 10.5 px: 12 px names at zoom >= 0.875, 11 px sub-labels at zoom
  // >= 0.955); smaller ones are hidden, and hovering a box shows its label.
  const LEGIBLE = 10.5;
  const apply = () => {
    view.setAttribute("transform", `translate(${t.x},${t.y}) scale(${t.k})`);
    canvas.classList.toggle("onnxnb-lod-names", 12 * t.k < LEGIBLE);
    canvas.classList.toggle("onnxnb-lod-subs", 11 * t.k < LEGIBLE);
  };
  // the drawing's width: the details panel takes its share only while it sits beside the drawing (a host may move
  // it elsewhere, or float it over the drawing)
  const beside = () => details.parentNode === body && getComputedStyle(details).position !== "absolute";
  const area = () => ({ w: (body.clientWidth - (beside() ? details.offsetWidth : 0)) || 800, h: body.clientHeight || 560 });
  // The whole graph in view ("fit"); the default view never zooms out past legible labels (it starts at the
  // top of a large graph instead, to be panned or fitted).
  const fitView = (legible) => {
    const { w, h } = area();
    t.k = Math.min(w / (bbox.width + 40), h / (bbox.height + 40), 1.5);
    if (legible) t.k = Math.max(t.k, 0.9);
    // wider than the drawing at a legible zoom: its middle in view (where a model's chain of layers runs; the left
    // edge would cut the chain and show side branches), to be panned or fitted
    t.x = (w - bbox.width * t.k) / 2;
    if (t.x >= 0) t.x = Math.max(t.x, 10);
    t.y = 20;
    apply();
  };

  function draw() {
    hover.style.display = "none";  // its box is about to go: no mouseleave will hide the label it showed
    const graph = model.get("graph") || { nodes: [], edges: [] };
    const overlay = model.get("overlay") || {};
    const highlight = model.get("highlight") || "";
    const depth = model.get("depth");
    const marks = model.get("marks") || {};
    const vis = buildVisible(graph, depth, expanded, overlay, marks);
    unitOfNode = vis.unitOfNode;
    title.textContent = `${graph.name || "graph"}: ${graph.nodes.length} nodes, ${vis.units.length} shown`;
    const vals = Object.values(overlay).filter((v) => typeof v === "number" && v > 0 && isFinite(v));
    const lo = vals.length ? Math.max(Math.min(...vals), 1e-12) : 1, hi = vals.length ? Math.max(...vals) : 1;
    legend.textContent = vals.length ? `${model.get("overlay_label") || "overlay"}: ${lo.toExponential(1)} … ${hi.toExponential(1)}` : "";

    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 28, marginx: 10, marginy: 10 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const u of vis.units) {
      const w = Math.max(70, 7 * Math.max(u.label.length, u.sub.length) + 18);
      g.setNode(u.id, { width: w, height: u.kind === "group" ? 40 : 34 });
    }
    for (const e of vis.edges) g.setEdge(e.source, e.target);
    dagre.layout(g);
    bbox = { width: g.graph().width || 1, height: g.graph().height || 1 };
    placed = new Map(vis.units.map((u) => [u.id, g.node(u.id)]));
    toHighlight.style.display = highlight ? "" : "none";
    toTop.style.display = vals.length ? "" : "none";
    toTop.textContent = `go to max ${model.get("overlay_label") || "value"}`;

    view.replaceChildren();
    const edgeLayer = svg("g", { class: "onnxnb-graph-edges" }, view);
    for (const e of g.edges()) {
      const pts = g.edge(e).points || [];
      if (!pts.length) continue;
      const d = "M" + pts.map((p) => `${p.x},${p.y}`).join("L");
      svg("path", { d, fill: "none", stroke: "#9aa0a6", "stroke-width": 1.2 }, edgeLayer);
    }
    for (const u of vis.units) {
      const p = g.node(u.id);
      const hit = highlight && u.members.includes(highlight);
      const grp = svg("g", {
        class: `onnxnb-graph-node onnxnb-graph-${u.kind === "group" ? "group" : "op"}` + (hit ? " onnxnb-highlight" : ""),
        transform: `translate(${p.x - p.width / 2},${p.y - p.height / 2})`, "data-id": u.id,
      }, view);
      const style = Object.hasOwn(MARK_STYLE, u.mark) ? MARK_STYLE[u.mark] : null;
      if (u.mark) grp.classList.add(`onnxnb-mark-${u.mark}`);
      const fill = colour(u.value, lo, hi) || (style ? style[0] : u.kind === "group" ? "#e8f0fe" : "#ffffff");
      svg("rect", {
        width: p.width, height: p.height, rx: u.kind === "group" ? 8 : 4, fill,
        stroke: hit ? "#b3261e" : style ? style[1] : u.kind === "group" ? "#4285f4" : "#5f6368",
        "stroke-width": hit ? 3 : style ? 2 : 1,
        "stroke-dasharray": u.kind === "group" ? "4 2" : "",
      }, grp);
      const t1 = svg("text", { x: 8, y: 14, "font-size": 12, "font-weight": 600, fill: "#202124", class: "onnxnb-graph-name" }, grp);
      t1.textContent = u.label;
      const t2 = svg("text", { x: 8, y: 27, "font-size": 11, fill: "#5f6368", class: "onnxnb-graph-sub" }, grp);
      t2.textContent = u.sub;
      grp.addEventListener("mouseenter", () => {
        if (11 * t.k >= LEGIBLE) return;  // every label of the box shows already
        const r = grp.getBoundingClientRect(), b = body.getBoundingClientRect();
        hover.textContent = u.sub ? `${u.label} · ${u.sub}` : u.label;
        Object.assign(hover.style, { display: "block", left: `${r.left - b.left}px`, top: `${r.bottom - b.top + 2}px` });
      });
      grp.addEventListener("mouseleave", () => { hover.style.display = "none"; });
      const tip = svg("title", {}, grp);
      tip.textContent = (u.kind === "group" ? `${u.prefix}: ${u.members.length} ops (click to expand)` :
        `${u.node.name} [${u.node.op}]` + (u.value !== undefined ? ` ${model.get("overlay_label")}=${u.value}` : ""))
        + (u.mark && u.mark !== "same" ? ` · ${u.kind === "group" ? u.markCount + " " : ""}${u.mark}` : "");
      grp.addEventListener("click", (ev) => {
        ev.stopPropagation();
        if (u.kind === "group") {
          expanded.add(u.prefix);
          model.set("expanded", [...expanded]);
          model.save_changes();
          draw();
          fitTo(u.members);  // the expanded group's operators come into view, never under the details panel
        } else {
          model.set("selected", u.node.name);
          model.save_changes();
          showDetails(u.node);
        }
      });
    }
    markSelected();
    apply();
  }

  // The selected operator's box (or the group that holds it) outlined, in this view and after every redraw.
  function markSelected() {
    const id = unitOfNode.get(model.get("selected") || "");
    for (const box of view.querySelectorAll(".onnxnb-graph-node")) {
      box.classList.toggle("onnxnb-selected", id !== undefined && box.dataset.id === String(id));
    }
  }

  // Frame the boxes that now hold these operators (e.g. a group just expanded) at a legible zoom.
  function fitTo(members) {
    const boxes = [...new Set(members.map((m) => unitOfNode.get(m)))].map((id) => placed.get(id)).filter(Boolean);
    if (!boxes.length) return fitView(true);
    const x0 = Math.min(...boxes.map((b) => b.x - b.width / 2)), x1 = Math.max(...boxes.map((b) => b.x + b.width / 2));
    const y0 = Math.min(...boxes.map((b) => b.y - b.height / 2)), y1 = Math.max(...boxes.map((b) => b.y + b.height / 2));
    const { w, h } = area();
    t.k = Math.max(Math.min(w / (x1 - x0 + 40), h / (y1 - y0 + 40), 1.5), 0.9);
    t.x = Math.max(w / 2 - ((x0 + x1) / 2) * t.k, 10 - x0 * t.k);  // centred, or from its left edge if wider
    t.y = Math.max(h / 2 - ((y0 + y1) / 2) * t.k, 20 - y0 * t.k);
    apply();
  }

  // Jump to one operator: open the groups that hold it, centre it at a legible zoom, show its details.
  function goTo(name) {
    const graph = model.get("graph") || { nodes: [] };
    const node = graph.nodes.find((n) => n.name === name);
    if (!node) return;
    if (node.module) {
      const parts = node.module.split(".");
      for (let d = 1; d <= parts.length; d++) expanded.add(parts.slice(0, d).join("."));
    } else {
      expanded.add(TOP);
      const loose = graph.nodes.filter((n) => !n.module);
      const i = loose.indexOf(node), k = Math.floor(i / CHUNK);
      if (loose.length > CHUNK) expanded.add(`${TOP} ${k * CHUNK + 1}–${Math.min((k + 1) * CHUNK, loose.length)}`);
    }
    model.set("expanded", [...expanded]);
    model.set("selected", name);
    model.save_changes();
    draw();
    const p = placed.get(unitOfNode.get(name));
    if (!p) return;
    const { w, h } = area();
    t.k = Math.max(t.k, 1);
    t.x = w / 2 - p.x * t.k;
    t.y = h / 2 - p.y * t.k;
    apply();
    showDetails(node);
  }

  function showDetails(node) {
    details.replaceChildren();
    el("div", "onnxnb-graph-details-title", details, `${node.op}: ${node.name}`);
    if (node.module) el("div", "onnxnb-graph-details-module", details, `module ${node.module}`);
    const info = model.get("details") || {};
    const rows = [];
    for (const i of node.inputs) rows.push(["in", i, (node.shapes || {})[i] || ""]);
    for (const o of node.outputs) rows.push(["out", o, (node.shapes || {})[o] || ""]);
    const table = el("table", "onnxnb-graph-io", details);
    for (const r of rows) {
      const tr = el("tr", "", table);
      for (const c of r) el("td", "", tr, String(c));
    }
    const attrs = Object.entries(node.attrs || {});
    if (attrs.length) {
      const at = el("table", "onnxnb-graph-attrs", details);
      for (const [k, v] of attrs) {
        const tr = el("tr", "", at);
        el("td", "", tr, k);
        el("td", "", tr, String(v));
      }
    }
    const box = el("div", "onnxnb-graph-values", details);
    box.textContent = info.node === node.name && info.values ? "" : "values: loading…";
    if (info.node === node.name) fillValues(box, info);
  }

  function fillValues(box, info) {
    box.replaceChildren();
    for (const v of info.values || []) el("div", "onnxnb-graph-value", box, v);
    if (info.overlay !== undefined && info.overlay !== null) el("div", "onnxnb-graph-value", box, `${model.get("overlay_label")}: ${info.overlay}`);
  }

  // pan and zoom
  let drag = null;
  canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX - t.x, y: ev.clientY - t.y }; });
  const release = () => { drag = null; };
  window.addEventListener("mouseup", release);
  canvas.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    t.x = ev.clientX - drag.x;
    t.y = ev.clientY - drag.y;
    apply();
  });
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = canvas.getBoundingClientRect();
    const mx = ev.clientX - r.left, my = ev.clientY - r.top;
    const f = Math.exp(-ev.deltaY * 0.0015);
    t.x = mx - (mx - t.x) * f;
    t.y = my - (my - t.y) * f;
    t.k *= f;
    apply();
  }, { passive: false });
  less.addEventListener("click", () => { model.set("depth", Math.max(0, model.get("depth") - 1)); expanded = new Set(); model.save_changes(); });
  more.addEventListener("click", () => { model.set("depth", model.get("depth") + 1); model.save_changes(); });
  fit.addEventListener("click", () => fitView(false));
  toHighlight.addEventListener("click", () => goTo(model.get("highlight")));
  toTop.addEventListener("click", () => {
    const overlay = model.get("overlay") || {};
    let best = null;
    for (const [k, v] of Object.entries(overlay)) if (typeof v === "number" && isFinite(v) && (best === null || v > overlay[best])) best = k;
    if (best !== null) goTo(best);
  });
  model.on("change:graph", () => { draw(); fitView(true); });
  model.on("change:overlay", draw);
  model.on("change:marks", draw);
  model.on("change:goto", () => { if (model.get("goto")) goTo(model.get("goto")); });
  model.on("change:highlight", draw);
  model.on("change:selected", markSelected);
  model.on("change:depth", () => { draw(); fitView(true); });
  model.on("change:details", () => {
    const info = model.get("details") || {};
    const box = details.querySelector(".onnxnb-graph-values");
    if (box && info.node === model.get("selected")) fillValues(box, info);
  });
  draw();
  requestAnimationFrame(() => fitView(true));
  // drawn before its container had a size (a tab still opening, a hidden pane): fit again once it has one, until
  // the user moves the view
  let moved = false;
  canvas.addEventListener("mousedown", () => { moved = true; });
  canvas.addEventListener("wheel", () => { moved = true; });
  let observer = null;
  if (typeof ResizeObserver !== "undefined") {
    let last = "";
    observer = new ResizeObserver(() => {
      const size = `${body.clientWidth}x${body.clientHeight}`;
      if (size !== last && body.clientWidth > 0 && !moved) fitView(true);
      last = size;
    });
    observer.observe(body);
  }
  // anywidget calls this when the view goes; the JupyterLab viewer when its tab closes
  return () => {
    window.removeEventListener("mouseup", release);
    if (observer) observer.disconnect();
  };
}

export default { render };
