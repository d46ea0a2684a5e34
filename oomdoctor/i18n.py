"""The language of the human text: which one, and the texts that are code.

oomdoctor speaks English (``en``) and Japanese (``ja``). Only human text is translated: JSON
keys, kinds, cause ids, flags and figures stay as they are. Texts that are data (cause summaries,
remedy titles, ``why`` and trade-offs) carry their translation beside the English in
``rules/advice/*.toml``; texts that are code (renderer labels, CLI and server messages) are
looked up here with the stdlib :mod:`gettext` in ``oomdoctor/locale/<lang>/LC_MESSAGES/oomdoctor.mo``.

The language in force is a context variable: :func:`use_lang` sets it around a diagnosis and its
rendering, so the advisor words its remedies, and the renderers their labels, in that language.
"""

from __future__ import annotations

import gettext as _gettext
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from pathlib import Path

#: the languages oomdoctor speaks; the first is the default
LANGS: tuple[str, ...] = ("en", "ja")
DOMAIN = "oomdoctor"
LOCALE_DIR = Path(__file__).with_name("locale")

_current: ContextVar[str] = ContextVar("oomdoctor_lang", default="en")


def normalize(value: str | None) -> str | None:
    """``ja``, ``ja_JP.UTF-8``, ``ja-JP``, ``JA`` -> ``ja``; an unknown or empty value -> None."""
    if not value:
        return None
    code = value.strip().split(".")[0].split("@")[0].replace("-", "_").split("_")[0].lower()
    return code if code in LANGS else None


def resolve_lang(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The language to speak: ``explicit`` (``--lang``), else ``OOMDOCTOR_LANG``, else the first
    set of ``LC_ALL``, ``LC_MESSAGES``, ``LANG`` (as POSIX reads them), else English.

    An explicit value that is not a known language raises ValueError; an environment value that
    is not one (``C``, ``fr_FR.UTF-8``) means English.
    """
    if explicit is not None:
        lang = normalize(explicit)
        if lang is None:
            raise ValueError(_("unknown language {value} (choose {langs})").format(value=repr(explicit), langs=", ".join(LANGS)))
        return lang
    env = os.environ if env is None else env
    own = normalize(env.get("OOMDOCTOR_LANG"))
    if own:
        return own
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = env.get(name)
        if value:  # the first one set decides, as in POSIX
            return normalize(value) or "en"
    return "en"


def current_lang() -> str:
    """The language in force (``en`` unless :func:`use_lang` says otherwise)."""
    return _current.get()


@contextmanager
def use_lang(lang: str | None) -> Iterator[str]:
    """Speak ``lang`` (``en`` when None) inside the ``with`` block."""
    chosen = normalize(lang) or "en"
    token = _current.set(chosen)
    try:
        yield chosen
    finally:
        _current.reset(token)


@cache
def translations(lang: str) -> _gettext.NullTranslations:
    """The compiled catalog of ``lang`` (English: the messages themselves)."""
    if lang == "en":
        return _gettext.NullTranslations()
    return _gettext.translation(DOMAIN, localedir=str(LOCALE_DIR), languages=[lang])


def _(message: str) -> str:
    """``message`` (an English text that is code) in the language in force."""
    return translations(current_lang()).gettext(message)


def N_(message: str) -> str:
    """Marks ``message`` for the catalog where it is defined; :func:`_` translates it where used."""
    return message


def join_sentences(sentences: Iterable[str]) -> str:
    """Whole sentences one after the other: a space between them in English, none in Japanese."""
    return ("" if current_lang() == "ja" else " ").join(sentences)


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural English text, in the language in force."""
    return translations(current_lang()).ngettext(singular, plural, n)
