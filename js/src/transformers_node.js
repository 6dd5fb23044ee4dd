// onnx-nb's check of a transformers.js folder under Node.js: loads @huggingface/transformers from the node_modules
// folder given first (its Node.js build, with onnxruntime-node), reads the request, prints one JSON object.
//   node transformers_node.mjs NODE_MODULES REQUEST.json
// REQUEST: {root, name, task, dtypes, texts, max_new_tokens}; the folder is ROOT/NAME, read with no network.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { checkFolder } from "./transformers_check.js";

const [modules, requestPath] = process.argv.slice(2);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const entry = join(modules, "@huggingface", "transformers", "dist", "transformers.node.mjs");
const tjs = await import(pathToFileURL(entry).href);
tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
tjs.env.localModelPath = request.root.endsWith("/") ? request.root : request.root + "/";
const out = await checkFolder(tjs, { ...request, device: "cpu" });
out.where = `Node.js ${process.version}`;
process.stdout.write(JSON.stringify(out) + "\n");
