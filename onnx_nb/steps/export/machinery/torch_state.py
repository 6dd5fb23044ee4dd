"""What an interrupted trace can leave behind in torch, cleared before the next export.

A Ctrl-C that lands while ``torch.export`` unwinds its context managers (inside an ``ExitStack.__exit__``) skips
the ones not yet closed: torch is left with a ``FakeTensorMode`` on its dispatch-mode stack and its "compiling" and
"exporting" flags set, and every later trace in that kernel fails in both exporters (onnx_ir's inliner pass;
``GuardOnDataDependentSymNode``). No export of ours starts inside a trace, so a mode or flag found at the start of one
is such a leftover: :func:`clear_leftovers` removes it.
"""

from __future__ import annotations

import warnings
from typing import Any


def leftovers(torch: Any) -> list[str]:
    """What a trace left set in torch (empty when torch is clean)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    found = [f"{type(mode).__name__} on the dispatch-mode stack" for mode in _get_current_dispatch_mode_stack()]
    for flag in ("_is_compiling_flag", "_is_exporting_flag"):
        if getattr(torch.compiler, flag, False):
            found.append(f"torch.compiler.{flag}")
    if torch._C._len_torch_function_stack():
        found.append("a mode on the torch-function stack")
    return found


def clear_leftovers() -> list[str]:
    """Clear what an interrupted trace left in torch; what was cleared (a warning says so too)."""
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    found = leftovers(torch)
    if not found:
        return []
    while _get_current_dispatch_mode_stack():
        _pop_mode()
    for flag in ("_is_compiling_flag", "_is_exporting_flag"):
        if getattr(torch.compiler, flag, False):
            setattr(torch.compiler, flag, False)
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    warnings.warn("an interrupted trace had left torch mid-trace (" + "; ".join(found) + "): cleared before this "
                  "export", RuntimeWarning, stacklevel=3)
    return found
