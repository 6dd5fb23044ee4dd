// ONNX Runtime Web's ES modules (glue included) and their WASM binaries, copied beside the widgets:
// the browser backend sends them to the page on first use, so it works offline and on Binder.
import { copyFileSync, mkdirSync, statSync } from "node:fs";

const from = "node_modules/onnxruntime-web/dist/";
const to = "../onnx_nb/static/ortweb/";
mkdirSync(to, { recursive: true });
let total = 0;
// the WASM build (provider "browser") and the WebGPU build (provider "browser-webgpu", loaded only when asked for)
for (const name of ["ort.wasm.bundle.min.mjs", "ort-wasm-simd-threaded.wasm",
                    "ort.webgpu.bundle.min.mjs", "ort-wasm-simd-threaded.asyncify.wasm"]) {
  copyFileSync(from + name, to + name);
  total += statSync(to + name).size;
}
console.log(`onnxruntime-web: ${(total / 2 ** 20).toFixed(1)} MiB copied to ${to}`);
