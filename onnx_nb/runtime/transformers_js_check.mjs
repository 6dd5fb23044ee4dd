// onnx-nb's check of a transformers.js folder, run by Node.js: loads the folder with @huggingface/transformers (the
// copy in the node_modules folder given first), runs the task's pipeline at each precision asked for and prints one
// JSON object: the version, and per precision the tokenized inputs, every output tensor of the model, the pipeline's
// answer and the generated tokens (text generation), or the error transformers.js raised.
//   node transformers_js_check.mjs NODE_MODULES REQUEST.json
// REQUEST: {root, name, task, dtypes, texts, max_new_tokens}; the folder is ROOT/NAME, read with no network.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, requestPath] = process.argv.slice(2);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const entry = join(modules, "@huggingface", "transformers", "dist", "transformers.node.mjs");
const tjs = await import(pathToFileURL(entry).href);
tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
tjs.env.localModelPath = request.root.endsWith("/") ? request.root : request.root + "/";

// a tensor as plain JSON (int64 data arrives as BigInt)
const plain = (t) => ({ dims: Array.from(t.dims), type: t.type, data: Array.from(t.data, Number) });
const tensors = (obj) => Object.fromEntries(Object.entries(obj).filter(([, v]) => v instanceof tjs.Tensor)
  .map(([k, v]) => [k, plain(v)]));
const json = (value) => JSON.parse(JSON.stringify(value, (_, v) => (typeof v === "bigint" ? Number(v) :
  v instanceof tjs.Tensor ? v.tolist() : v)));

const out = { version: tjs.env.version, node: process.version, runs: [] };
for (const dtype of request.dtypes) {
  const run = { dtype };
  const started = performance.now();
  try {
    const pipe = await tjs.pipeline(request.task, request.name, { dtype, device: "cpu" });
    run.load_ms = performance.now() - started;
    const ran = performance.now();
    if (request.task === "text-generation") {
      run.tokens = [];
      for (const text of request.texts) {
        const enc = await pipe.tokenizer(text);
        const ids = await pipe.model.generate({ ...enc, max_new_tokens: request.max_new_tokens, do_sample: false });
        run.tokens.push(Array.from(ids.tolist()[0], Number));
      }
      run.answer = json(await pipe(request.texts[0], { max_new_tokens: request.max_new_tokens, do_sample: false }));
    } else {
      const enc = await pipe.tokenizer(request.texts, { padding: true, truncation: true });
      run.inputs = tensors(enc);
      run.outputs = tensors(await pipe.model(enc));
      const options = request.task === "feature-extraction" ? { pooling: "mean", normalize: true } : {};
      run.answer = json(await pipe(request.texts, options));
    }
    run.run_ms = performance.now() - ran;
  } catch (e) {
    run.error = String((e && e.message) || e).split("\n")[0].slice(0, 400);
  }
  out.runs.push(run);
}
process.stdout.write(JSON.stringify(out) + "\n");
