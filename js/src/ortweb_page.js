// The headless-Chromium side of the browser backend: the same handler, reachable from Playwright as
// window.onnxnb.handle(msg, base64 buffers) -> [json, base64 buffers].
import { handle } from "./ortweb_core.js";

function fromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

function toBase64(bytes) {
  let raw = "";
  for (let i = 0; i < bytes.length; i += 0x8000) raw += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(raw);
}

async function fetched(url) {
  return new Uint8Array(await (await fetch(url)).arrayBuffer());
}

globalThis.onnxnb = {
  // buffers: base64 strings, or {url} for large ones the page fetches itself (ORT Web, the model)
  async handle(msg, buffers) {
    const bytes = await Promise.all((buffers || []).map((b) => (typeof b === "string" ? fromBase64(b) : fetched(b.url))));
    const [reply, out] = await handle(msg, bytes);
    return [reply, out.map(toBase64)];
  },
};
