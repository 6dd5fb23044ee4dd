// transformers.js's own run of a folder onnx-nb wrote, at each precision asked for: the task's pipeline, the inputs
// its tokenizer gave, every output tensor of the model, the pipeline's answer and, for text generation, the greedy
// tokens of each text alone (or the error transformers.js raised). An image task's request brings its images as RGB
// pixels ({width, height, data}), a speech task's its clips (samples); the processor's tensors come back as the
// inputs (as each clip's or image's features where the model generates from them: speech, image-to-text). One implementation for both places it runs: Node.js (transformers_node.js) and a browser page
// (ortweb_core.js's "tjs" request).

// a tensor as plain JSON (int64 data arrives as BigInt)
function plain(t) {
  return { dims: Array.from(t.dims), type: t.type, data: Array.from(t.data, Number) };
}

export async function checkFolder(tjs, request) {
  const tensors = (obj) => Object.fromEntries(Object.entries(obj).filter(([, v]) => v instanceof tjs.Tensor)
    .map(([k, v]) => [k, plain(v)]));
  const json = (value) => JSON.parse(JSON.stringify(value, (_, v) => (typeof v === "bigint" ? Number(v) :
    v instanceof tjs.Tensor ? v.tolist() : v)));
  const out = { version: tjs.env.version, runs: [] };
  const images = (request.images ?? []).map((im) => new tjs.RawImage(Uint8ClampedArray.from(im.data), im.width,
                                                                       im.height, 3));
  const audio = (request.audio ?? []).map((a) => Float32Array.from(a));
  // what a model generates from, one at a time: speech recognition's clips, image-to-text's images
  const sources = audio.length ? audio : request.task === "image-to-text" ? images : [];
  // the model's inputs as the pipeline makes them: its processor's from the images, else its tokenizer's (of
  // [question, context] pairs for question answering)
  const paired = request.task === "question-answering";
  const encode = (pipe, texts) => (images.length ? pipe.processor(images)
    : paired ? pipe.tokenizer(texts.map((t) => t[0]), { text_pair: texts.map((t) => t[1]), padding: true,
                                                        truncation: true })
      : pipe.tokenizer(texts, { padding: true, truncation: true }));
  for (const dtype of request.dtypes) {
    const run = { dtype };
    const started = performance.now();
    try {
      const pipe = await tjs.pipeline(request.task, request.name, { dtype, device: request.device });
      run.load_ms = performance.now() - started;
      const ran = performance.now();
      const generating = request.task === "text-generation" || request.task === "text2text-generation";
      if (sources.length) {
        // speech recognition, an image's text: each clip's features (each image's pixel values) by its processor,
        // then greedy tokens from them (the model's own start tokens first)
        run.tokens = [];
        run.features = [];
        // the start tokens it puts before the new ones (Whisper's: start, language, task, no-timestamps)
        const model = pipe.model;
        run.init_tokens = typeof model._retrieve_init_tokens === "function"
          ? model._retrieve_init_tokens(model._prepare_generation_config(null, {})).map(Number) : [];
        for (const clip of sources) {
          const enc = await pipe.processor(clip);
          const ids = await pipe.model.generate({ ...enc, max_new_tokens: request.max_new_tokens, do_sample: false, num_beams: 1 });
          run.tokens.push(Array.from(ids.tolist()[0], Number));
          run.features.push(tensors(enc));
        }
        // the pipeline's text (its decoding may refuse a tokenizer it does not expect: said, not fatal)
        run.answer = json(await pipe(sources[0], { max_new_tokens: request.max_new_tokens })
          .catch((e) => ({ error: String((e && e.message) || e).slice(0, 200) })));
      } else if (generating) {
        run.tokens = [];
        for (const text of request.texts) {
          const enc = await pipe.tokenizer(text);
          const ids = await pipe.model.generate({ ...enc, max_new_tokens: request.max_new_tokens, do_sample: false, num_beams: 1 });
          run.tokens.push(Array.from(ids.tolist()[0], Number));
        }
        run.answer = json(await pipe(request.texts[0], { max_new_tokens: request.max_new_tokens, do_sample: false, num_beams: 1 }));
      } else {
        const enc = await encode(pipe, request.texts);
        run.inputs = tensors(enc);
        run.outputs = tensors(await pipe.model(enc));
        const options = request.task === "feature-extraction" ? { pooling: "mean", normalize: true } : {};
        run.answer = json(paired ? await pipe(request.texts[0][0], request.texts[0][1])
          : await pipe(images.length ? images : request.texts, options));
      }
      run.first_ms = performance.now() - ran;
      // timed runs of the model itself on the same inputs (the first text, for generation): its latency here
      const enc = sources.length ? await pipe.processor(sources[0])
        : await encode(pipe, generating ? request.texts[0] : request.texts);
      run.times_ms = [];
      for (let i = 0; i < (request.runs ?? 3); i++) {
        const t0 = performance.now();
        if (generating || sources.length) {
          await pipe.model.generate({ ...enc, max_new_tokens: request.max_new_tokens, do_sample: false, num_beams: 1 });
        } else {
          await pipe.model(enc);
        }
        run.times_ms.push(performance.now() - t0);
      }
      await pipe.dispose();
    } catch (e) {
      run.error = String((e && e.message) || e).split("\n")[0].slice(0, 400);
    }
    out.runs.push(run);
  }
  return out;
}
