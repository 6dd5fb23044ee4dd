// onnx-nb's browser backend: ONNX Runtime Web sessions in this page, driven by messages from the kernel (a
// notebook's widget) or from a headless Chromium (the command line, CI). The same handler serves both.
// ORT Web itself (its ES module and its WASM) is not bundled here: it arrives from the kernel on first use,
// so the other widgets stay small.

const sessions = new Map();
let ort = null;
let info = null;

const TYPES = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array, int8: Int8Array,
  uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array, uint16: Uint16Array, int16: Int16Array,
};

function toTensor(spec, buffer) {
  const Kind = TYPES[spec.type];
  if (!Kind) throw new Error(`onnx-nb: no typed array for ${spec.type}`);
  const bytes = buffer instanceof ArrayBuffer ? new Uint8Array(buffer) : new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  const copy = bytes.slice().buffer; // aligned, owned by the tensor
  return new ort.Tensor(spec.type, new Kind(copy), spec.dims);
}

function feedsOf(msg, buffers) {
  const feeds = {};
  msg.inputs.forEach((spec, i) => { feeds[spec.name] = toTensor(spec, buffers[i]); });
  return feeds;
}

async function load(msg, buffers) {
  if (!ort) {
    const url = URL.createObjectURL(new Blob([buffers[0]], { type: "text/javascript" }));
    ort = await import(/* webpackIgnore: true */ url);
    ort.env.wasm.wasmBinary = buffers[1] instanceof ArrayBuffer ? buffers[1] : buffers[1].buffer.slice(buffers[1].byteOffset, buffers[1].byteOffset + buffers[1].byteLength);
    const isolated = Boolean(globalThis.crossOriginIsolated);
    // threads need SharedArrayBuffer, which only a cross-origin isolated page has
    ort.env.wasm.numThreads = isolated ? Math.max(1, Math.min(msg.threads || navigator.hardwareConcurrency || 1, 16)) : 1;
    ort.env.wasm.proxy = false;
    info = {
      ort_web: ort.env.versions ? (ort.env.versions.web || ort.env.versions.common) : "unknown",
      user_agent: navigator.userAgent, isolated, threads: ort.env.wasm.numThreads,
      webgpu: Boolean(navigator.gpu),
    };
  }
  return info;
}

async function open(msg, buffers) {
  const ep = msg.ep === "webgpu" ? "webgpu" : "wasm";
  if (ep === "webgpu" && !navigator.gpu) throw new Error("this browser offers no WebGPU (navigator.gpu is missing)");
  const bytes = new Uint8Array(buffers[0] instanceof ArrayBuffer ? buffers[0] : buffers[0].buffer.slice(buffers[0].byteOffset, buffers[0].byteOffset + buffers[0].byteLength));
  const t0 = performance.now();
  const session = await ort.InferenceSession.create(bytes, { executionProviders: [ep], graphOptimizationLevel: msg.level || "all" });
  sessions.set(msg.session, session);
  return { inputs: session.inputNames, outputs: session.outputNames, open_ms: performance.now() - t0 };
}

async function run(msg, buffers) {
  const session = sessions.get(msg.session);
  const out = await session.run(feedsOf(msg, buffers));
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
  const session = sessions.get(msg.session);
  const feeds = feedsOf(msg, buffers);
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
  const session = sessions.get(msg.session);
  if (session) { await session.release(); sessions.delete(msg.session); }
  return {};
}

const OPS = { load, open, run, time, close };

// One request: {op, ...} with binary buffers; the reply [json, buffers]; an error becomes {error: message}.
export async function handle(msg, buffers) {
  try {
    const result = await OPS[msg.op](msg, buffers || []);
    return Array.isArray(result) ? result : [result, []];
  } catch (err) {
    return [{ error: String((err && err.message) || err) }, []];
  }
}
