"""The command line's pydantic runs without plugins, and so without importing ``importlib.metadata``.

pydantic looks for plugins (entry points of the group ``pydantic``) when it builds the first
validator of a process. Importing ``importlib.metadata`` (email, zipfile, socket, tempfile... about
50 modules) and reading every installed distribution's entry points cost about 20 ms: a tenth of
the whole diagnosis of a small log. oomdoctor's models are its own, built and read inside one
command, so a pydantic plugin (a hook that observes validation, e.g. for tracing) has nothing of
the user's to observe there. The command line therefore tells pydantic that there are none, as
``PYDANTIC_DISABLE_PLUGINS=__all__`` would, but without the import.

Left alone: ``oomdoctor serve`` (its HTTP models are the user's service), a process where pydantic
already looked (a plugin may be in use), and a process where ``PYDANTIC_DISABLE_PLUGINS`` is set
(pydantic applies it itself). The Python API (``oomdoctor.diagnose``) never calls this.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable
from typing import Any

#: the module whose ``get_plugins()`` pydantic asks when it builds a validator
LOADER = "pydantic.plugin._loader"


def _no_plugins() -> Iterable[Any]:
    return ()


def _real_loader(name: str) -> Any:
    """Any other name a later pydantic asks of the loader: the real module takes the stand-in's place."""
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib

    sys.modules.pop(LOADER, None)
    return getattr(importlib.import_module(LOADER), name)


def skip_plugin_lookup() -> bool:
    """Stand in for pydantic's plugin loader with one that finds no plugin; True when it did.

    Call before the first pydantic model is built (validators are built on first use)."""
    if LOADER in sys.modules or "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        return False
    stand_in = types.ModuleType(LOADER, "No pydantic plugins in the oomdoctor command line (oomdoctor.cli.pydantic_plugins).")
    stand_in.get_plugins = _no_plugins  # type: ignore[attr-defined]
    stand_in.__getattr__ = _real_loader  # type: ignore[method-assign]
    sys.modules[LOADER] = stand_in
    return True
