// transformers.js (npm @huggingface/transformers, its browser build) for the page onnx-nb checks a folder in: sent to
// the page on first use, like ONNX Runtime Web. Its ONNX Runtime is the ONNX Runtime Web build onnx-nb already ships
// (esbuild aliases onnxruntime-web/webgpu and onnxruntime-common to it, so one Tensor class serves both), its WASM
// handed over as bytes: nothing is fetched from a CDN.
export * from "@huggingface/transformers";
