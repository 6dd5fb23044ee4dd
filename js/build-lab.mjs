// Builds the prebuilt JupyterLab extension (onnx_nb/labextension) with @jupyterlab/builder, against the core
// metadata npm's @jupyterlab/core-meta ships: no Python JupyterLab is needed to build it.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const core = join(here, "node_modules", ".onnx-nb-core");
mkdirSync(core, { recursive: true });
copyFileSync(join(here, "node_modules", "@jupyterlab", "core-meta", "core.package.json"), join(core, "package.json"));
const builder = join(here, "node_modules", "@jupyterlab", "builder", "lib", "build-labextension.js");
const args = [builder, "--core-path", core, ...process.argv.slice(2), here];
execFileSync(process.execPath, args, { stdio: "inherit", cwd: here });
