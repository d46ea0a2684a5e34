"""The user's defaults: default hints and output options from a TOML file.

The first of these that exists is read (one file, never a merge of several):

1. ``$OOMDOCTOR_CONFIG`` (a path; set it to an empty file, e.g. ``/dev/null``, for none);
2. ``oomdoctor.toml`` in the current directory or the nearest directory above it, up to the
   project's root (the first directory holding ``.git``);
3. ``$XDG_CONFIG_HOME/oomdoctor/config.toml`` (default ``~/.config/oomdoctor/config.toml``).

::

    [hints]            # as --hint KEY=VALUE; a --hint of the same key wins
    gpu = "A10G"
    gpus = 2
    model = "Qwen/Qwen2.5-7B-Instruct"

    [output]           # the command line wins
    format = "text"    # text, json, jsonl, markdown, slack
    brief = true       # --brief (text only)
    plain = false      # --plain
    fail-on = "error"  # --fail-on
    lang = "en"        # --lang

A key the file may not hold, or a value its key does not take, is a usage error naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oomdoctor.i18n import _

#: the keys of ``[output]`` and the type each takes
OUTPUT_KEYS: dict[str, type] = {"format": str, "brief": bool, "plain": bool, "fail-on": str, "lang": str}
SECTIONS = ("hints", "output")
#: the values a string key of ``[output]`` takes
_CHOICES: dict[str, tuple[str, ...]] = {
    "format": ("text", "json", "jsonl", "markdown", "slack"),
    "fail-on": ("error", "warning"),
    "lang": ("en", "ja"),
}
NAME = "oomdoctor.toml"


class ConfigFileError(ValueError):
    """A config file that cannot be read or holds what it may not; one line naming the file."""


@dataclass
class UserConfig:
    path: Path | None = None
    hints: dict[str, str] = field(default_factory=dict)
    output: dict[str, Any] = field(default_factory=dict)


def config_path(env: dict[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """The config file in force (see the module's documentation), or None."""
    e = os.environ if env is None else env
    explicit = e.get("OOMDOCTOR_CONFIG")
    if explicit:
        return Path(explicit)
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / NAME).is_file():
            return d / NAME
        if (d / ".git").exists():
            break
    base = Path(e["XDG_CONFIG_HOME"]) if e.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    user = base / "oomdoctor" / "config.toml"
    return user if user.is_file() else None


def load_config(env: dict[str, str] | None = None, cwd: Path | None = None) -> UserConfig:
    """The user's defaults (empty when no file is in force); raises :class:`ConfigFileError`."""
    path = config_path(env, cwd)
    if path is None:
        return UserConfig()
    from oomdoctor.cache import toml_module

    tomllib = toml_module()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigFileError(_("config {path}: cannot read: {error}").format(path=path, error=exc.strerror or exc)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigFileError(_("config {path}: not TOML: {error}").format(path=path, error=exc)) from None
    for key in data:
        if key not in SECTIONS or not isinstance(data[key], dict):
            raise ConfigFileError(_("config {path}: unknown section {key} (known: [hints], [output])").format(
                path=path, key=repr(key)))
    from oomdoctor.hints import HintError, validate_hints

    try:
        hints = validate_hints(data.get("hints", {}))
    except HintError as exc:
        raise ConfigFileError(_("config {path}: {problem}").format(path=path, problem=exc)) from None
    output: dict[str, Any] = {}
    for key, value in data.get("output", {}).items():
        kind = OUTPUT_KEYS.get(key.replace("_", "-"))
        if kind is None:
            raise ConfigFileError(_("config {path}: unknown [output] key {key} (known: {keys})").format(
                path=path, key=repr(key), keys=", ".join(OUTPUT_KEYS)))
        if type(value) is not kind:
            raise ConfigFileError(_("config {path}: [output] {key} takes {kind}, got {value}").format(
                path=path, key=key, kind=_("true or false") if kind is bool else _("a string"), value=repr(value)))
        allowed = _CHOICES.get(key.replace("_", "-"))
        if allowed is not None and value not in allowed:
            raise ConfigFileError(_("config {path}: [output] {key} takes one of {choices}, got {value}").format(
                path=path, key=key, choices=", ".join(allowed), value=repr(value)))
        output[key.replace("_", "-")] = value
    return UserConfig(path, hints, output)


__all__ = ["ConfigFileError", "UserConfig", "config_path", "load_config"]
