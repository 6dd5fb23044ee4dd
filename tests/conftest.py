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

import tiny_models
from deprecations import Watch

# A suite started in the background from a non-interactive shell inherits SIGINT ignored, and so would every child
# it starts (an ignored signal stays ignored across exec): the Ctrl-C tests would see no interrupt land. Python's own
# handler here means the children start with the default disposition and install theirs.
signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The docs site last: it renders the tutorials tests/test_notebooks.py executed (and executes only those it
    finds no fresh copy of), so in a whole run no tutorial runs twice."""
    items.sort(key=lambda item: item.nodeid.startswith("tests/test_docs.py") or
               item.nodeid.startswith("test_docs.py"))


@pytest.fixture(scope="session", autouse=True)
def leaves_the_checkout_as_it_found_it() -> Iterator[None]:
    """Exports given no out= write under ./onnx_nb_out: what the run added there is removed at its end."""
    import shutil

    root = Path("onnx_nb_out")
    before = set(root.iterdir()) if root.is_dir() else None
    yield
    if root.is_dir():
        for entry in set(root.iterdir()) - (before or set()):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        if before is None and not any(root.iterdir()):
            root.rmdir()


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
