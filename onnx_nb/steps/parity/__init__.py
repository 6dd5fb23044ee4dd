"""Numeric parity between an ONNX model and its PyTorch (or ONNX) reference."""
