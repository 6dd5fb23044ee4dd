// The notebook side of the browser backend: an invisible-but-honest widget (one status line) whose custom
// messages carry the kernel's requests to ONNX Runtime Web in this page and the replies back, as binary buffers.
import { handle } from "./ortweb_core.js";

// Replies carry their arrays as base64 inside the message: a kernel busy running the cell that asked is handed only
// the message's data, on its shell channel thread (ipykernel 7), not its binary buffers.
function toBase64(bytes) {
  let raw = "";
  for (let i = 0; i < bytes.length; i += 0x8000) raw += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(raw);
}

function render({ model, el }) {
  el.classList.add("onnxnb-ortweb");
  const line = document.createElement("div");
  line.className = "onnxnb-ortweb-status";
  line.textContent = "ONNX Runtime Web in this page: waiting for the kernel";
  el.appendChild(line);
  let loaded = null;
  const onMessage = async (msg, buffers) => {
    if (!msg || msg.op === undefined) return;
    line.textContent = `ONNX Runtime Web in this page: ${msg.op}…`;
    const [reply, out] = await handle(msg, buffers);
    model.send({ ...reply, id: msg.id, b64: out.map(toBase64) });
    if (reply && reply.ort_web) loaded = reply;
    const i = loaded;
    const about = i
      ? `ONNX Runtime Web ${i.ort_web} in this page (WASM, ${i.threads} thread${i.threads > 1 ? "s" : ""}${i.isolated ? "" : ": the page is not cross-origin isolated"})`
      : "ONNX Runtime Web in this page";
    line.textContent = reply.error ? `${about}: error: ${reply.error}` : about;
  };
  model.on("msg:custom", onMessage);
  model.send({ ready: true, user_agent: navigator.userAgent }); // a page is here: the kernel may use it
  return () => model.off("msg:custom", onMessage);
}

export default { render };
