from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).parent))

import scheduling

scheduling.set_worker_environment()  # before torch is imported (tiny_models)

import timings  # noqa: E402
import tiny_models  # noqa: E402
from deprecations import Watch  # noqa: E402


def _freeze_imports() -> None:
    """The libraries every test imports, imported once and moved out of the cyclic collector's sight (``gc.freeze``):
    a full collection walks every object the process holds, and in a worker holding torch, transformers, ONNX and
    ONNX Runtime's modules that took 0.3 to 0.5 s each (a tenth of the suite's time in the steps' collections,
    ``runtime/memory.give_back``); module objects live as long as the process anyway. The steps' own garbage is
    collected as before: only what exists now is frozen."""
    import gc

    import onnx  # noqa: F401
    import onnxruntime.quantization
    import onnxruntime.transformers.optimizer  # noqa: F401
    import onnxscript  # noqa: F401
    import torch._dynamo
    import torch.onnx._internal.exporter._core  # noqa: F401
    import transformers.modeling_utils  # noqa: F401

    gc.collect()
    gc.freeze()


_freeze_imports()

# The tests' models are tiny (two layers): torch's fake-tensor dispatch cache costs them more than it saves (its hits
# rebuild symbolic sizes), and their exports take 9 to 19% less time without it (the same graphs; a six-layer model
# breaks even, MiniLM and deeper ones are faster with it, so the package leaves torch's default:
# benchmarks/fake_tensor_cache.py). Set in this process only: notebooks' kernels and the CLI run as a user's would.
import torch._dynamo.config  # noqa: E402

torch._dynamo.config.fake_tensor_cache_enabled = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After each test, what the process holds is frozen too (what the test imported: a model family's modules, the
    exporter's caches), so the steps' full collections in the next test walk only what that test makes; after the
    last test of a file (its module fixtures just torn down) everything is unfrozen and collected once, so garbage
    frozen within the file is freed there. Without this, the workers spent 7% of the suite's time in the steps' full
    collections (``runtime/memory.give_back``), each walking the 0.4 to 0.8 million objects a worker had gathered."""
    import gc

    yield
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        gc.unfreeze()
        gc.collect()
    gc.freeze()

# A suite started in the background from a non-interactive shell inherits SIGINT ignored, and so would every child
# it starts (an ignored signal stays ignored across exec): the Ctrl-C tests would see no interrupt land. Python's own
# handler here means the children start with the default disposition and install theirs.
signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--timings", default="build/test-durations.json",
                     help="where the run's per-test and per-fixture seconds go (benchmarks/suite_time.py reads it)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(timings.Recorder(config, Path(config.getoption("timings"))), "onnx-nb-timings")
    config.pluginmanager.register(scheduling.Scheduler(config), "onnx-nb-scheduler")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's unit of work and the order units start in (tests/scheduling.py); the docs site after the tutorials
    tests/test_notebooks.py executed (it renders them, and executes only those it finds no fresh copy of), so in a
    whole run no tutorial runs twice."""
    scheduling.order(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist hands out units of work as tests/scheduling.py draws them."""
    return scheduling.make_scheduler(config, log)


_CHECKOUT_ROOT = Path("onnx_nb_out")
_checkout_before: set[Path] | None = None


def pytest_sessionstart(session: pytest.Session) -> None:
    """Steps given no out= write under each worker's own root (ONNX_NB_OUT, tests/scheduling.py); whatever a run
    still adds to the checkout's ./onnx_nb_out is removed at its end, by the one process that started the run."""
    global _checkout_before
    if not timings.is_worker(session.config):
        _checkout_before = set(_CHECKOUT_ROOT.iterdir()) if _CHECKOUT_ROOT.is_dir() else None


def pytest_sessionfinish(session: pytest.Session) -> None:
    import shutil

    if timings.is_worker(session.config) or not _CHECKOUT_ROOT.is_dir():
        return
    for entry in set(_CHECKOUT_ROOT.iterdir()) - (_checkout_before or set()):
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    if _checkout_before is None and not any(_CHECKOUT_ROOT.iterdir()):
        _CHECKOUT_ROOT.rmdir()


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Every test starts from the same random state, whichever tests ran before it (a sample drawn from torch's
    global generator at collection once made a parity test depend on the order of the run)."""
    import random

    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def no_deprecated_calls() -> Iterator[None]:
    """A deprecation raised by onnx-nb's own call into a library fails the test (tests/deprecations.py)."""
    with Watch() as watch:
        yield
    if watch.found:
        pytest.fail("deprecated calls of ours:\n" + "\n".join(dict.fromkeys(watch.found)), pytrace=False)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every tiny architecture saved once to a local Hugging Face folder."""
    root = tmp_path_factory.mktemp("tiny")
    return {name: tiny_models.save(name, root / name) for name in tiny_models.CONFIGS}


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    from onnx_nb.frontends.demo import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def ip() -> object:
    """One IPython shell for the whole run (IPython's test app can only be started once)."""
    from IPython.testing.globalipapp import get_ipython, start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "onnx_nb")
    return shell



# Shared, read-only exports: the models many files export the same way, exported once per worker. A test that writes
# beside its parent (a variant's default name is the parent's with a suffix) takes a private copy first
# (helpers.copy_export); a test that needs other export settings keeps its own export.
@pytest.fixture(scope="session")
def shared_exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shared-exports")


@pytest.fixture(scope="session")
def bert_export(shared_exports: Path) -> object:
    """The tiny BERT classifier (tiny_models "bert") exported with default settings."""
    import onnx_nb

    return onnx_nb.export(tiny_models.build("bert"), out=shared_exports / "bert" / "bert.onnx", progress=False)


@pytest.fixture(scope="session")
def minilm_export(shared_exports: Path, minilm_dir: Path) -> object:
    """all-MiniLM-L6-v2 from its folder, exported with default settings."""
    import onnx_nb

    return onnx_nb.export(str(minilm_dir), out=shared_exports / "minilm" / "model.onnx", progress=False)


@pytest.fixture(scope="session")
def gpt2_export(shared_exports: Path) -> object:
    """The tiny GPT-2 exported with default settings (with its cache)."""
    import onnx_nb

    return onnx_nb.export(tiny_models.build("gpt2"), out=shared_exports / "gpt2" / "gpt2.onnx", progress=False)


@pytest.fixture(scope="session")
def gpt2_whole_export(shared_exports: Path) -> object:
    """The tiny GPT-2 exported with ``cache=False`` (the whole sequence's logits)."""
    import onnx_nb

    return onnx_nb.export(tiny_models.build("gpt2"), out=shared_exports / "gpt2-whole" / "g.onnx", cache=False,
                          progress=False)
