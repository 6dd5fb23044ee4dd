// onnx-nb's browser backend: ONNX Runtime Web sessions in this page, driven by messages from the kernel (a
// notebook's widget) or from a headless Chromium (the command line, CI). The same handler serves both.
// ORT Web itself (its ES module and its WASM) is not bundled here: it arrives from the kernel on first use,
// so the other widgets stay small.

import { checkFolder } from "./transformers_check.js";

const sessions = new Map(); // id -> {session, ort}
const builds = {}; // "wasm" | "webgpu" -> the ORT Web module of that build, once loaded
const infos = {};

const TYPES = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array, int8: Int8Array,
  uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array, uint16: Uint16Array, int16: Int16Array,
};

function toTensor(ort, spec, buffer) {
  const Kind = TYPES[spec.type];
  if (!Kind) throw new Error(`onnx-nb: no typed array for ${spec.type}`);
  const bytes = buffer instanceof ArrayBuffer ? new Uint8Array(buffer) : new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  const copy = bytes.slice().buffer; // aligned, owned by the tensor
  return new ort.Tensor(spec.type, new Kind(copy), spec.dims);
}

function feedsOf(ort, msg, buffers) {
  const feeds = {};
  msg.inputs.forEach((spec, i) => { feeds[spec.name] = toTensor(ort, spec, buffers[i]); });
  return feeds;
}

function arrayBuffer(b) {
  return b instanceof ArrayBuffer ? b : b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
}

// The WebGPU adapter this page would use: {vendor, architecture, description}, or why there is none.
async function adapterInfo() {
  if (!navigator.gpu) return { none: "this browser offers no WebGPU (navigator.gpu is missing; a secure page is needed)" };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { none: "this browser offers no WebGPU adapter (navigator.gpu.requestAdapter() gave none)" };
  const i = adapter.info || {};
  return { vendor: i.vendor || "", architecture: i.architecture || "", description: i.description || "",
           fallback: Boolean(i.isFallbackAdapter ?? adapter.isFallbackAdapter) };
}

// A software adapter (SwiftShader: Chromium's CPU emulation of a GPU, offered where there is none): it runs the
// model, but its time says nothing of a GPU's.
function softwareAdapter(a) {
  return Boolean(a && (a.fallback || /swiftshader/i.test(`${a.architecture} ${a.description} ${a.vendor}`)));
}

// For the WebGPU build, the page's adapter, kept for the rows; an error reply when the page offers none.
async function adapterFor(build) {
  if (build !== "webgpu") return null;
  const adapter = await adapterInfo();
  if (adapter.none) return { error: adapter.none, no_adapter: true };
  infos.adapter = adapter;
  return null;
}

// An ES module sent as bytes (buffers[0]), imported, its ONNX Runtime Web's WASM (buffers[1]) handed over as bytes.
async function withWasm(buffers, wasmOf, threads) {
  const url = URL.createObjectURL(new Blob([buffers[0]], { type: "text/javascript" }));
  const module = await import(/* webpackIgnore: true */ url);
  const wasm = wasmOf(module);
  wasm.wasmBinary = arrayBuffer(buffers[1]);
  wasm.numThreads = threads;
  wasm.proxy = false;
  return module;
}

async function load(msg, buffers) {
  const build = msg.build === "webgpu" ? "webgpu" : "wasm";
  if (!builds[build]) {
    const refused = await adapterFor(build);
    if (refused) return refused;
    const isolated = Boolean(globalThis.crossOriginIsolated);
    // threads need SharedArrayBuffer, which only a cross-origin isolated page has
    const ort = await withWasm(buffers, (m) => m.env.wasm,
      isolated ? Math.max(1, Math.min(msg.threads || navigator.hardwareConcurrency || 1, 16)) : 1);
    builds[build] = ort;
    infos[build] = {
      ort_web: ort.env.versions ? (ort.env.versions.web || ort.env.versions.common) : "unknown",
      user_agent: navigator.userAgent, isolated, threads: ort.env.wasm.numThreads,
      ...(build === "webgpu" ? { adapter: infos.adapter } : {}),
    };
  }
  return infos[build];
}

async function open(msg, buffers) {
  const ep = msg.ep === "webgpu" ? "webgpu" : "wasm";
  const ort = builds[ep];
  const bytes = new Uint8Array(arrayBuffer(buffers[0]));
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(bytes, { executionProviders: [ep], graphOptimizationLevel: msg.level || "all" });
  sessions.set(msg.session, { session, ort });
  return { inputs: session.inputNames, outputs: session.outputNames, open_ms: performance.now() - t0 };
}

async function run(msg, buffers) {
  const { session, ort } = sessions.get(msg.session);
  const out = await session.run(feedsOf(ort, msg, buffers));
  const specs = [];
  const data = [];
  for (const name of session.outputNames) {
    const t = out[name];
    const values = await t.getData();
    specs.push({ name, type: t.type, dims: Array.from(t.dims) });
    data.push(new Uint8Array(values.buffer, values.byteOffset, values.byteLength).slice());
  }
  return [{ outputs: specs }, data];
}

async function time(msg, buffers) {
  const { session, ort } = sessions.get(msg.session);
  const feeds = feedsOf(ort, msg, buffers);
  for (let i = 0; i < msg.warmup; i++) await session.run(feeds);
  const times = [];
  const start = performance.now();
  while (true) {
    const t0 = performance.now();
    await session.run(feeds);
    times.push(performance.now() - t0);
    const enough = msg.runs ? times.length >= msg.runs : times.length >= 10 && performance.now() - start >= msg.min_seconds * 1000;
    if (enough) break;
  }
  return { times_ms: times };
}

async function close(msg) {
  const entry = sessions.get(msg.session);
  if (entry) { await entry.session.release(); sessions.delete(msg.session); }
  return {};
}

// transformers.js in this page, checking a folder onnx-nb wrote (onnx_nb.to_transformers_js): its browser build on
// ONNX Runtime Web's WASM build (onnx_nb/static/transformers_web.js) or WebGPU build (transformers_webgpu.js) and that
// build's WASM arrive with the first request for it; each request brings the folder's files, which transformers.js
// reads through env.fetch from memory: nothing is fetched from the network, and one thread runs its WASM (a worker
// would need the bundle's own URL).
const transformers = {}; // "wasm" | "webgpu" -> transformers.js's browser build on that ONNX Runtime Web build
async function tjs(msg, buffers) {
  const build = msg.build === "webgpu" ? "webgpu" : "wasm";
  if (!transformers[build]) {
    const refused = await adapterFor(build);
    if (refused) return refused;
    const module = await withWasm(buffers, (m) => m.env.backends.onnx.wasm, 1);
    module.env.backends.onnx.wasm.wasmPaths = undefined;
    Object.assign(module.env, { allowRemoteModels: false, allowLocalModels: true, useBrowserCache: false,
                                useWasmCache: false, localModelPath: "/onnx-nb-folder/" });
    transformers[build] = module;
  }
  const module = transformers[build];
  const files = new Map(msg.files.map((name, i) => [`/onnx-nb-folder/${msg.name}/${name}`, buffers[2 + i]]));
  module.env.fetch = async (url) => {
    const bytes = files.get(new URL(String(url), "http://page.invalid").pathname);
    return bytes ? new Response(bytes, { status: 200 }) : new Response("not found", { status: 404 });
  };
  const software = build === "webgpu" && softwareAdapter(infos.adapter);
  // on a software adapter the check runs and nothing is timed (its figures would pass for a GPU's)
  const out = await checkFolder(module, { ...msg, device: build, ...(software ? { runs: 0 } : {}) });
  if (software) out.untimed = "a software adapter (a CPU emulation of a GPU): its time says nothing of a GPU's";
  const browser = navigator.userAgent.match(/(HeadlessChrome|Chrome|Firefox|Safari)\/[\d]+/)?.[0] || "a browser";
  const a = infos.adapter || {};
  // the adapter named, so a software one (SwiftShader) never passes for a GPU
  out.where = `${browser}, ${build === "webgpu" ? `WebGPU (adapter ${[a.vendor, a.description || a.architecture].filter(Boolean).join(" ") || "unnamed"})` : "WASM"}`;
  return out;
}

const OPS = { load, open, run, time, close, tjs };

// One request: {op, ...} with binary buffers; the reply [json, buffers]; an error becomes {error: message}.
export async function handle(msg, buffers) {
  try {
    const result = await OPS[msg.op](msg, buffers || []);
    return Array.isArray(result) ? result : [result, []];
  } catch (err) {
    return [{ error: String((err && err.message) || err) }, []];
  }
}
