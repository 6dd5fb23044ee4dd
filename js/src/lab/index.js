// onnx-nb in JupyterLab: .onnx files open as graphs (double-click or Open With; the file's bytes never come to the
// browser: the server extension reads its structure), two files compare side by side, and the launcher and the
// command palette offer the tutorials, "Export a model…" and the Studio.
import { ILayoutRestorer } from "@jupyterlab/application";
import { ICommandPalette, InputDialog, MainAreaWidget, showErrorMessage, WidgetTracker } from "@jupyterlab/apputils";
import { ABCWidgetFactory, DocumentWidget, TextModelFactory } from "@jupyterlab/docregistry";
import { IFileBrowserFactory } from "@jupyterlab/filebrowser";
import { ILauncher } from "@jupyterlab/launcher";
import { LabIcon } from "@jupyterlab/ui-components";

import { api, CompareViewer, OnnxViewer } from "./viewer.js";
import "../widgets.css";
import "./lab.css";

const FACTORY = "ONNX graph (onnx-nb)";
// a small graph: three nodes and their edges (the file type's, the launcher cards' and the palette's icon)
const graphIcon = new LabIcon({
  name: "onnx-nb:graph",
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16"><g class="jp-icon3" fill="#616161">'
    + '<rect x="8" y="2" width="8" height="5" rx="1"/><rect x="2" y="17" width="8" height="5" rx="1"/>'
    + '<rect x="14" y="17" width="8" height="5" rx="1"/><path d="M11.3 7h1.4v4H18.7v6h-1.4v-4.6H6.7V17H5.3v-6h6z"/></g></svg>',
});
const CATEGORY = "onnx-nb";

// A model factory that asks the server for no content (fileFormat null): a multi-GB file is never downloaded.
class NoContentModelFactory extends TextModelFactory {
  get name() { return "onnx-nb-no-content"; }
  get contentType() { return "file"; }
  get fileFormat() { return null; }
}

class OnnxWidgetFactory extends ABCWidgetFactory {
  createNewWidget(context) {
    const widget = new DocumentWidget({ content: new OnnxViewer(context.path), context });
    widget.addClass("onnxnb-lab-document");
    return widget;
  }
}

async function openNew(app, kind, extra) {
  const browser = extra.browser;
  const cwd = browser && browser.model ? browser.model.path : "";
  try {
    const r = await api("notebook", null, { kind, cwd, ...extra.body });
    await app.commands.execute("docmanager:open", { path: r.path });
  } catch (e) {
    await showErrorMessage("onnx-nb", String(e.message || e));
  }
}

function onnxSelection(browserFactory) {
  const browser = browserFactory && browserFactory.tracker.currentWidget;
  if (!browser) return [];
  const items = [...browser.selectedItems()].filter((i) => i.type !== "directory" && i.path.endsWith(".onnx"));
  // the original first: a file whose name extends the other's ("model.int8.onnx" of "model.onnx") is its variant;
  // otherwise the older file
  const stem = (p) => p.slice(0, -".onnx".length);
  items.sort((x, y) => (y.path.startsWith(stem(x.path) + ".") ? -1 : x.path.startsWith(stem(y.path) + ".") ? 1
    : String(x.last_modified).localeCompare(String(y.last_modified))));
  return items.map((i) => i.path);
}

const plugin = {
  id: "onnx-nb:plugin",
  description: "onnx-nb: .onnx files as graphs, compare, launcher cards",
  autoStart: true,
  optional: [ICommandPalette, ILauncher, ILayoutRestorer, IFileBrowserFactory],
  activate: (app, palette, launcher, restorer, browserFactory) => {
    app.docRegistry.addModelFactory(new NoContentModelFactory());
    app.docRegistry.addFileType({
      name: "onnx", displayName: "ONNX model", extensions: [".onnx"], mimeTypes: ["application/octet-stream"],
      contentType: "file", fileFormat: "base64", icon: graphIcon,
    });
    const factory = new OnnxWidgetFactory({
      name: FACTORY, label: "ONNX graph", modelName: "onnx-nb-no-content", fileTypes: ["onnx"], defaultFor: ["onnx"],
      readOnly: true, canStartKernel: false, preferKernel: false,
    });
    app.docRegistry.addWidgetFactory(factory);
    const tracker = new WidgetTracker({ namespace: "onnx-nb-viewer" });
    factory.widgetCreated.connect((_, widget) => { void tracker.add(widget); });
    if (restorer) {
      void restorer.restore(tracker, {
        command: "docmanager:open", args: (w) => ({ path: w.context.path, factory: FACTORY }), name: (w) => w.context.path,
      });
    }
    const currentBrowser = () => browserFactory && browserFactory.tracker.currentWidget;

    app.commands.addCommand("onnx-nb:compare", {
      label: "Compare ONNX files…",
      icon: graphIcon,
      caption: "Two .onnx files side by side: fused, quantized, added and removed nodes marked",
      execute: async (args) => {
        let [a, b] = args.a && args.b ? [args.a, args.b] : onnxSelection(browserFactory);
        if (!a || !b) {
          const first = await InputDialog.getText({ title: "Compare: the first .onnx file", text: a || "" });
          if (!first.button.accept || !first.value) return;
          const second = await InputDialog.getText({ title: "Compare: the second .onnx file", text: b || "" });
          if (!second.button.accept || !second.value) return;
          [a, b] = [first.value, second.value];
        }
        const widget = new MainAreaWidget({ content: new CompareViewer(a, b) });
        widget.title.label = `Compare ${a.split("/").pop()} ↔ ${b.split("/").pop()}`;
        app.shell.add(widget, "main");
      },
    });
    // "Export a model…" and the Studio: ask for the model (unless the command's args name it), write the notebook
    for (const [kind, label, caption] of [
      ["export", "Export a model…", "A notebook that exports a model to ONNX, checks it, optimizes, quantizes and times it"],
      ["studio", "onnx-nb Studio…", "A notebook with the Studio: the whole pipeline as a dashboard"],
    ]) {
      app.commands.addCommand(`onnx-nb:${kind}`, {
        label, caption, icon: graphIcon,
        execute: async (args) => {
          let model = args.model;
          if (!model) {
            const r = await InputDialog.getText({ title: label.replace("…", ""), label: "Model (empty: the demo model)",
              placeholder: "hub id, model folder or .onnx file" });
            if (!r.button.accept) return;
            model = (r.value || "").trim();  // empty: the server writes the demo model's notebook
          }
          await openNew(app, kind, { browser: currentBrowser(), body: { model } });
        },
      });
    }
    app.commands.addCommand("onnx-nb:tutorial", {
      label: (args) => (args.title ? `Tutorial: ${args.title}` : "onnx-nb tutorial"),
      icon: graphIcon,
      caption: "A copy of this onnx-nb tutorial in the current folder",
      execute: (args) => openNew(app, "tutorial", { browser: currentBrowser(), body: { file: args.file } }),
    });
    app.contextMenu.addItem({ command: "onnx-nb:compare", selector: '.jp-DirListing-item[data-file-type="onnx"]', rank: 20 });

    const main = ["onnx-nb:export", "onnx-nb:studio", "onnx-nb:compare"];
    main.forEach((command, rank) => {
      if (palette) palette.addItem({ command, category: CATEGORY });
      if (launcher) launcher.add({ command, category: CATEGORY, rank });
    });
    api("tutorials").then((list) => {
      list.forEach((t, i) => {
        const args = { file: t.file, title: t.title };
        if (palette) palette.addItem({ command: "onnx-nb:tutorial", args, category: CATEGORY });
        if (launcher) launcher.add({ command: "onnx-nb:tutorial", args, category: CATEGORY, rank: 10 + i });
      });
    }).catch((e) => console.warn("onnx-nb: no tutorials", e));
  },
};

export default plugin;
