"""User facts (``--hint KEY=VALUE`` on the command line, ``"hints"`` in an HTTP request): one
validation for both, with the same one-line messages.

A hint that would be ignored or fail deep inside the advisor (``gpus=two``, ``gpu=Z999``,
``gpu-memory=lots``, a ``model-config`` that is no readable JSON object, an unknown key) is a
:class:`HintError` here, before any log is read.
"""

from __future__ import annotations

from collections.abc import Mapping

from oomdoctor.i18n import _

#: the facts a hint may give, with what each means
HINT_KEYS: dict[str, str] = {
    "gpus": "GPUs available (tensor-parallel advice)",
    "gpu": "GPU name, e.g. A10G or H100",
    "gpu-memory": "memory per GPU, e.g. 24GiB",
    "model": "model name from the catalog",
    "model-config": "the model's config.json",
    "vllm-version": "vLLM version (alias: version)",
    "version": "the engine version",
}

#: a GPU count above this is no single node's or job's count that the advice could use
MAX_GPUS = 4096


class HintError(ValueError):
    """A hint that is malformed, has an unknown key or a value the key does not take."""


def hint_key(key: str) -> str:
    """``gpu_memory`` and `` gpu-memory `` -> ``gpu-memory``."""
    return key.strip().replace("_", "-")


def parse_hint_items(items: list[str]) -> dict[str, str]:
    """``["gpus=2"]`` -> ``{"gpus": "2"}`` (the command line's ``--hint``), validated by
    :func:`validate_hints`; raises :class:`HintError`."""
    raw: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise HintError(_("--hint expects KEY=VALUE, got {value}").format(value=repr(item)))
        raw[key] = value
    return validate_hints(raw)


def _text(key: str, value: object) -> str:
    """A hint's value as text: strings as they are, whole numbers and decimals as written
    (``2`` -> ``"2"``); anything else (true, null, a list) is no fact a hint gives."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HintError(_("hint {key}: expected a string or a number, got {value}").format(key=key, value=repr(value)))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def validate_hints(raw: Mapping[str, object]) -> dict[str, str]:
    """The hints with normalised keys and text values; raises :class:`HintError` with one line
    naming the hint for an unknown key or a value its key does not take."""
    hints: dict[str, str] = {}
    for key, value in raw.items():
        name = hint_key(str(key))
        if name not in HINT_KEYS:
            raise HintError(
                _("unknown hint key {key} (known: {keys})").format(key=repr(str(key).strip()), keys=", ".join(HINT_KEYS))
            )
        text = _text(name, value)
        if (problem := value_error(name, text)) is not None:
            raise HintError(problem)
        hints[name] = text
    return hints


def value_error(name: str, value: str) -> str | None:
    """Why ``value`` is no value of hint ``name`` (one line), or None."""
    shown = f"{name}={value}"
    if not value:
        return _("hint {hint}: empty value").format(hint=shown)
    if name == "gpus":
        if not value.isdigit() or not 1 <= int(value) <= MAX_GPUS:
            return _("hint {hint}: expected a whole number of GPUs from 1 to {most}, e.g. gpus=2").format(
                hint=shown, most=MAX_GPUS)
    elif name == "gpu":
        from oomdoctor.advisor.catalog import find_gpu, gpu_names

        if find_gpu(value) is None:
            import difflib

            close = difflib.get_close_matches(value.upper(), gpu_names(), n=3, cutoff=0.5)
            if close:
                return _("hint {hint}: unknown GPU (did you mean {names}?); or give its memory: gpu-memory=24GiB").format(
                    hint=shown, names=", ".join(close))
            return _("hint {hint}: unknown GPU; give its memory instead, e.g. gpu-memory=24GiB").format(hint=shown)
    elif name == "gpu-memory":
        from oomdoctor.units import SizeError, parse_size

        try:
            size = parse_size(value, "GiB")
        except SizeError:
            size = 0
        if size <= 0:
            return _("hint {hint}: not a memory size, e.g. gpu-memory=24GiB or gpu-memory=80GB").format(hint=shown)
    elif name == "model-config":
        from oomdoctor.cli.checks import model_config_error

        if (problem := model_config_error(value)) is not None:
            return _("hint {hint}: {problem}").format(hint=shown, problem=problem.partition(": ")[2] or problem)
    return None


__all__ = ["HINT_KEYS", "HintError", "hint_key", "parse_hint_items", "validate_hints", "value_error"]
