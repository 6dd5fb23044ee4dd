"""``python -m onnx_nb ...``: the same command line as ``onnx-nb ...``."""

from onnx_nb.frontends.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
