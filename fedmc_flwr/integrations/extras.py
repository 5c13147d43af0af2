"""The optional `hooks` extra: what export, serving, the hooks and the metrics exporter
import, and one clear line when it is not installed.

kubernetes, onnx, onnxruntime and prometheus-client are not required by training, so a
plain `pip install fedmc-flwr` (and Flower's runtime install of `flwr run`) leaves them
out. The modules that need them import them through `require`, which turns a missing
one into a `MissingExtra` naming the extra, never an ImportError traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from fedmc_flwr.errors import RunFailure

INSTALL = "pip install 'fedmc-flwr[hooks]'"


class MissingExtra(RunFailure):
    """A feature of the `hooks` extra used without it installed (exit code 1)."""


def require(module: str, feature: str) -> ModuleType:
    """`import module`, or `MissingExtra` naming `feature` and the extra when the module's
    distribution is not installed (an ImportError inside an installed one propagates)."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != top:
            raise
        raise MissingExtra(
            f"{feature} needs {top}, which comes with the optional 'hooks' extra: {INSTALL}"
        ) from None
