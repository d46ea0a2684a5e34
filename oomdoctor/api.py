"""The Python API: :func:`diagnose` a log given as text, bytes or lines."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from oomdoctor.i18n import resolve_lang, use_lang
from oomdoctor.inputs import bom_encoding
from oomdoctor.redaction import redact_report
from oomdoctor.report import Report
from oomdoctor.rulepack import RulePack, default_pack, load_pack
from oomdoctor.scanner import Scanner


def diagnose(
    log: str | bytes | Iterable[str],
    hints: Mapping[str, str] | None = None,
    *,
    rules: Iterable[Path | str] | None = None,
    pack: RulePack | None = None,
    source: str = "<text>",
    redact: bool = True,
    lang: str = "en",
) -> Report:
    """Diagnose a log and return the :class:`~oomdoctor.report.Report`.

    ``log`` may be the whole text, raw bytes, or an iterable of lines (with or without newlines).
    ``hints`` are user facts such as ``{"gpus": "2", "gpu": "A10G"}``; ``rules`` adds rule
    directories on top of the built-in pack.

    ``redact`` (default True): secrets in the echoed text (API keys, tokens, JWTs, passwords in
    URLs; see :mod:`oomdoctor.redaction`) are replaced by ``[REDACTED]``, as in every output of
    the CLI and the server, so a report can be pasted or posted as it is. Figures and remedy
    values are never touched; pass ``redact=False`` for the log's own text.

    ``lang`` (``"en"`` or ``"ja"``): the language of the human text (cause summaries, remedy
    titles, why and trade-offs); ``report.lang`` says which. Keys, kinds, cause ids, flags and
    figures are the same in every language. Render the report inside
    ``oomdoctor.i18n.use_lang(report.lang)`` for renderer labels in the same language.
    """
    with use_lang(resolve_lang(lang)):
        return _diagnose(log, hints, rules=rules, pack=pack, source=source, redact=redact)


def _diagnose(
    log: str | bytes | Iterable[str],
    hints: Mapping[str, str] | None,
    *,
    rules: Iterable[Path | str] | None,
    pack: RulePack | None,
    source: str,
    redact: bool,
) -> Report:
    if pack is None:
        pack = load_pack([Path(r) for r in rules]) if rules else default_pack()
    scanner = Scanner(pack, source=source, hints=dict(hints or {}))
    if isinstance(log, (bytes, str)):
        if isinstance(log, str):
            data = log.encode("utf-8", "surrogateescape")
        else:
            encoding = bom_encoding(log[:4])
            data = log if encoding is None else log.decode(encoding, "replace").encode("utf-8")
        scanner.rereadable(lambda a, b: data[a:b])  # (in memory: evidence far behind is read only if asked)
        scanner.feed(data)
    else:
        for line in log:
            scanner.feed(line.encode("utf-8", "surrogateescape"))
            if not line.endswith("\n"):
                scanner.feed(b"\n")
    report = scanner.close()
    return redact_report(report) if redact else report
