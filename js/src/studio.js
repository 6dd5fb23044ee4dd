// onnx-nb studio: the pipeline's steps as tabs, with run buttons, live progress, provider and shape
// choices, tolerance sliders that re-judge parity at once, and each step's results inline.
// Every button calls the same Python core functions as the magics (through a message to the kernel).
import { el } from "./dom.js";

// The tabs and the quantize methods come from the kernel (onnx_nb.plan): one step plan, in Python.

function slider(parent, label, cls, min, max, step, value, fmt, onInput) {
  const wrap = el("label", "onnxnb-studio-slider " + cls, parent);
  el("span", "onnxnb-studio-slider-label", wrap, label);
  const input = el("input", "", wrap);
  Object.assign(input, { type: "range", min, max, step, value });
  const out = el("span", "onnxnb-studio-slider-value", wrap, fmt(Number(value)));
  input.addEventListener("input", () => { out.textContent = fmt(Number(input.value)); onInput(Number(input.value)); });
  return { input, out };
}

function render({ model, el: root }) {
  root.classList.add("onnxnb-studio");
  const head = el("div", "onnxnb-studio-head", root);
  el("span", "onnxnb-studio-title", head, "onnx-nb studio: " + model.get("model_name"));
  const runAll = el("button", "onnxnb-studio-run-all", head, "Run all steps");
  const tabs = el("div", "onnxnb-studio-tabs", root);
  const controls = el("div", "onnxnb-studio-controls", root);
  const statusBar = el("div", "onnxnb-studio-status", root);
  const bar = el("div", "onnxnb-studio-progress", statusBar);
  const fill = el("div", "onnxnb-studio-progress-fill", bar);
  const statusText = el("span", "onnxnb-studio-status-text", statusBar);
  const panel = el("div", "onnxnb-studio-panel", root);
  let current = model.get("tab") || "export";

  // provider and shape choices (shared by every step)
  const providers = el("div", "onnxnb-studio-providers", controls);
  el("span", "", providers, "providers:");
  const chosen = new Set(model.get("providers"));
  for (const p of model.get("available_providers")) {
    const l = el("label", "onnxnb-studio-provider", providers);
    const box = el("input", "", l);
    box.type = "checkbox";
    box.checked = chosen.has(p);
    box.value = p;
    el("span", "", l, " " + p);
    box.addEventListener("change", () => {
      box.checked ? chosen.add(p) : chosen.delete(p);
      model.set("providers", [...chosen]);
      model.save_changes();
    });
  }
  const shapesWrap = el("label", "onnxnb-studio-shapes", controls);
  el("span", "", shapesWrap, " shapes: ");
  const shapes = el("input", "onnxnb-studio-shapes-input", shapesWrap);
  shapes.value = model.get("shapes");
  shapes.placeholder = "auto, or batch=4,sequence=32;batch=1";
  shapes.addEventListener("change", () => { model.set("shapes", shapes.value); model.save_changes(); });
  const method = el("select", "onnxnb-studio-method", controls);
  for (const m of model.get("methods") || []) {
    const o = el("option", "", method, m);
    o.value = m;
  }
  method.value = model.get("quantize_method");
  method.addEventListener("change", () => { model.set("quantize_method", method.value); model.save_changes(); });

  // tolerance sliders (parity tab), as the kernel describes them (onnx_nb.results.parity_view.sliders): moving
  // one sends its value and the kernel re-judges the stored errors at once
  const sliders = el("div", "onnxnb-studio-sliders", controls);
  const fmt = { exp: (v) => v.toExponential(1), fixed: (v) => v.toFixed(4) };
  function drawSliders() {
    sliders.textContent = "";
    for (const spec of model.get("sliders") || []) {
      const toValue = (x) => (spec.log ? Math.pow(10, x) : x);
      const start = spec.log ? Math.log10(spec.value) : spec.value;
      slider(sliders, spec.label, "onnxnb-studio-" + spec.key.replace("_", "-"), spec.min, spec.max, spec.step, start,
        (x) => (fmt[spec.format] || fmt.fixed)(toValue(x)), (x) => {
          model.set("tolerances", { ...(model.get("tolerances") || {}), [spec.key]: toValue(x) });
          model.save_changes();
        });
    }
  }
  drawSliders();
  model.on("change:sliders", drawSliders);

  const steps = model.get("steps") || [];
  const buttons = {};
  for (const [key, label] of steps) {
    const b = el("button", "onnxnb-studio-tab onnxnb-studio-tab-" + key, tabs, label);
    b.addEventListener("click", () => { current = key; model.set("tab", key); model.save_changes(); draw(); });
    buttons[key] = b;
  }
  const runBtn = el("button", "onnxnb-studio-run", controls, "Run");
  runBtn.addEventListener("click", () => model.send({ type: "run", step: current }));
  runAll.addEventListener("click", () => model.send({ type: "run", step: "all" }));

  function draw() {
    for (const [key] of steps) buttons[key].classList.toggle("onnxnb-studio-tab-active", key === current);
    sliders.style.display = current === "parity" ? "" : "none";
    method.style.display = current === "quantize" ? "" : "none";
    runBtn.textContent = current === "report" ? "Build report" : "Run " + current;
    const html = (model.get("html") || {})[current];
    const busy = model.get("busy");
    const running = model.get("running");
    if (html) panel.innerHTML = html;  // escaped by the kernel (onnx_nb.render.esc): model text is never markup
    else {
      panel.textContent = "";
      el("div", "onnxnb-studio-empty", panel, running === current
        ? `Running ${current}…`
        : `No ${current} result yet: press “${runBtn.textContent}”.`);
    }
    runBtn.disabled = busy;
    runAll.disabled = busy;
    statusText.textContent = model.get("status");
    fill.style.width = Math.round(100 * model.get("progress")) + "%";
    root.classList.toggle("onnxnb-studio-busy", busy);
  }
  for (const name of ["html", "busy", "status", "progress", "tab", "running"]) model.on("change:" + name, () => {
    current = model.get("tab") || current;
    draw();
  });
  draw();
}

export default { render };
