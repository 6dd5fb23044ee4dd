"""onnx-nb's own calls use no deprecated API: the watch that fails a test on one (tests/deprecations.py) catches a
deprecated call of ours and leaves a library's own internals alone; the cache goes in and out of transformers under
the name the installed release uses."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

from deprecations import Watch

pytestmark = pytest.mark.lower_bounds


def test_a_deprecated_keyword_passed_through_module_call_is_ours() -> None:
    class Model(torch.nn.Module):
        def forward(self, new: torch.Tensor | None = None, **old: torch.Tensor) -> torch.Tensor | None:
            if old:  # what transformers' deprecate_kwarg does: a FutureWarning at the caller (stacklevel 2)
                warnings.warn("`old` is deprecated. Use `new` instead.", FutureWarning, stacklevel=2)
            return new

    with warnings.catch_warnings(record=True), Watch() as watch:  # kept out of the test log
        warnings.simplefilter("always")
        Model()(old=torch.ones(1))
    assert watch.found and "from our call at test_deprecations.py" in watch.found[0], watch.found


def test_a_librarys_own_deprecation_is_not_ours() -> None:
    namespace: dict[str, object] = {}
    code = "import warnings\ndef inner():\n    warnings.warn('x is deprecated', FutureWarning, stacklevel=1)\n"
    exec(compile(code, "/usr/lib/python3/dist-packages/somelib/core.py", "exec"), namespace)
    with warnings.catch_warnings(record=True) as seen, Watch() as watch:
        warnings.simplefilter("always")
        namespace["inner"]()  # type: ignore[operator]
    assert seen and not watch.found


def test_the_cache_goes_in_and_out_under_the_installed_name() -> None:
    import transformers

    from onnx_nb.steps.export.caches.hf_names import cache_kwargs, cache_name, cache_of
    from tiny_models import build

    model = build("llama").eval()
    takes = inspect.signature(model.forward).parameters
    assert cache_name(model) == ("cache" if "cache" in takes else "past_key_values")
    ids = torch.tensor([[3, 4, 5]])
    with Watch() as watch, torch.no_grad():
        first = model(input_ids=ids, use_cache=True, return_dict=True)
        cache = cache_of(first)
        second = model(input_ids=torch.tensor([[6]]), **cache_kwargs(model, cache), use_cache=True, return_dict=True)
    assert not watch.found, watch.found
    assert cache_of(second).get_seq_length() == 4
    full = model(input_ids=torch.tensor([[3, 4, 5, 6]])).logits[:, -1]
    torch.testing.assert_close(second.logits[:, -1], full, atol=1e-4, rtol=1e-4)
    if "cache" in takes:  # a release that renamed it: the old name is deprecated, and the watch says so
        with warnings.catch_warnings(record=True), Watch() as watch, torch.no_grad():
            warnings.simplefilter("always")
            model(input_ids=torch.tensor([[6]]), past_key_values=cache_of(first), use_cache=True)
        assert watch.found and "test_deprecations.py" in watch.found[0], (transformers.__version__, watch.found)
