"""The kinds of model, one package each: everything that knows what the model is (its adapter, its export, its
reference, its parity runs, its generation runner and ``to_transformers`` model, its latency rows, its result
class). The generic steps (``onnx_nb/steps``) import no kind: they reach a kind through the rows of
``steps/export/adapters/registry.py`` (``ROWS``, ``SHAPES``), which name it by dotted path. A kind's package may
import the steps' machinery, the results and the runtime (tests/test_layers.py checks the direction)."""
