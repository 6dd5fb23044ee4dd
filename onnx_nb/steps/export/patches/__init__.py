"""Export-time rewrites of a model, in one place and under one contract (:class:`.contract.Patch`): where each
applies (what in a model it recognises), what it replaces, and why the export needs it.

- Module patches, lent to a model's instances for the length of a dynamo export with onnx-nb's own patch set
  (:func:`.applying.applied`; transformers' set stands in for them where :mod:`.upstream` says):
  :mod:`.experts` (an experts loop of a family's own: transformers' grouped dispatch), :mod:`.expert_tables` (a
  table of expert modules looping over the experts hit: every expert in turn), :mod:`.windows` (windows pooled
  into entries without a branch on the length), :mod:`.scans` (a recurrence looping over the tokens: one scan),
  :mod:`.blocks` (attention within fixed blocks of frames, and windows pooled into queries, without a branch on
  the length), :mod:`.positions` (a position table's cached step from sizes, not an ``int()``), :mod:`.sliding`
  (attention within a window with global tokens, over the whole sequence: no strided chunks, no padding),
  :mod:`.lengths` (``len()`` of a tensor as its first size, in the model's source modules: a batch kept dynamic),
  :mod:`.audio_windows` (attention within windows of a packed audio sequence, masked, its bounds as tensors),
  :mod:`.series_rows` (a forecaster's Python loop over its series: the rows of a tensor cut, padded and masked
  together), :mod:`.image_patches` (an image embedding drawing its patches in a random order: every patch in
  raster order, each image's position table sampled at its size), :mod:`.mask_annealing` (a masked-attention
  schedule held in a buffer, read as the model's constants: no branch on a lifted input),
  :mod:`.unmasked_attention` (attention that is causal only when padded: the mask eager sdpa code leaves out, in
  the graph), :mod:`.pooled_patches` (patches pooled by their positions for any count of patches: a scatter in
  place of a one-hot table, the kernel size from the config), :mod:`.durations` (a text-to-speech length regulator
  over every row at once: no loop over the batch, no branch on the durations), :mod:`.text_queries` (an
  open-vocabulary detector's text queries through its tower at once, regrouped per image by gathers: no cache keyed
  by token ids, no loop over the images), :mod:`.window_crops` (a shifted-window layer's crop of its padding traced
  whatever the sample's size).
  They lend through :func:`.lending.lent`, which gives each instance its own attribute back (:mod:`.mask_annealing`
  shadows a buffer with an instance attribute itself: a module refuses a non-tensor set in a buffer's name).
- :mod:`.attention`: transformers' eager attention for a trace that needs the decomposed layout.
- :mod:`.vision_towers`: the span attention of grid vision towers (transformers' own export patches, and two
  repairs of them), lent by the vision-language export around its tower; its ``UNLISTED`` patch, with the module
  patches, gives the same reshape to span attention classes transformers' patches do not list (Cosmos 3 Edge's).
- :mod:`.matching`: onnxscript's pattern matcher in time linear in the graph (the exporter's clean-up and ORT's
  fusions), applied with the module patches; :mod:`.torchlib`: the exporter's registry of ONNX functions built once
  per process.
- :mod:`.upstream`: transformers' own export patch set, tried before onnx-nb's rewrites for a model it writes patches
  for; onnx-nb's own run where its file fails the check.
- :mod:`.translations`: ONNX translations the dynamo exporter lacks (an integer mask's ``1.0 - mask`` among them),
  given to every dynamo export, and the repairs made on its graph after.

Nothing here is imported by ``import onnx_nb``: the exporters import what they apply.
"""
