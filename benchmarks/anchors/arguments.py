"""The command line both anchor scripts take (they run in side environments, without onnx-nb)."""

from __future__ import annotations

import argparse
from pathlib import Path


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--prompt", required=True, help="token ids, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="generations; the first is the untimed one")
    return parser.parse_args()
