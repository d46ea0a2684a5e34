"""Checks of command-line inputs that would otherwise be ignored or fail deep inside: one line each."""

from __future__ import annotations

import json
import os
import stat

#: a model's config.json is a few kB; anything larger is not one
MAX_MODEL_CONFIG = 16 << 20


def model_config_error(path: str) -> str | None:
    """Why ``--model-config PATH`` cannot be used (missing, a directory, unreadable, binary, not a
    JSON object), or None when it is a readable JSON object."""
    where = f"--model-config {path}"
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{where}: {exc.strerror or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"{where}: is a directory (give the model's config.json)"
    if st.st_size > MAX_MODEL_CONFIG:
        return f"{where}: {st.st_size} bytes is too large for a model's config.json"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_MODEL_CONFIG + 1)
    except OSError as exc:
        return f"{where}: cannot read: {exc.strerror or exc}"
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        return f"{where}: not text (binary data); give the model's config.json"
    except RecursionError:
        return f"{where}: nested too deeply to be a model's config.json"
    except ValueError as exc:
        return f"{where}: not JSON: {getattr(exc, 'msg', exc)} at line {getattr(exc, 'lineno', '?')}"
    if not isinstance(data, dict):
        return f"{where}: not a JSON object (a model's config.json holds one)"
    return None
