"""Does a flag exist in the detected version of an engine? One answer for the advisor and the command checker.

:func:`flag_exists` is the only version gate: the advisor drops a remedy whose flag the version lacks,
and :mod:`~oomdoctor.advisor.engine_args` checks rebuilt command lines with it. Two sources feed it:

- the flag lists generated from vLLM's and SGLang's own argument parsers and llama.cpp's
  ``common/arg.cpp`` (``oomdoctor/data/engine_args/``, :func:`oomdoctor.advisor.engine_samples.sampled`),
  which answer for every ``--flag`` and ``--flag=value`` of those engines from the oldest sampled
  release on (llama.cpp's samples are release builds, matched with the ``build: NNNN (hash)`` line
  its programs print; its ``LLAMA_ARG_*`` variables answer as the options they stand for);
- the hand table ``rules/advice/flags.toml``, only for what those samples cannot tell: engines without
  generated data (TGI, TensorRT-LLM, ...), environment variables and programs
  (``vllm serve``), versions older than the oldest sample, and versions between two samples that
  disagree (``--swap-space`` after 0.14.0, gone by 0.19.1: the table says until 0.17.1).

A test checks that the hand table never contradicts the generated data at a sampled release.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from oomdoctor import cache
from oomdoctor.advisor.engine_samples import sampled
from oomdoctor.advisor.memory_model import Version, parse_version
from oomdoctor.paths import builtin_rules_dir


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, dict[str, Any]]]:
    data = cache.load_toml(builtin_rules_dir() / "advice" / "flags.toml")
    for engine, flags in data.items():
        for flag, span in flags.items():
            extra = set(span) - {"since", "until", "seen", "source"}
            versions = [str(v) for k, v in span.items() if k != "source"]
            if extra or not all(parse_version(v) for v in versions) or not isinstance(span.get("source", ""), str):
                raise ValueError(
                    f"flags.toml: [{engine}] {flag!r}: only since/until/seen = \"x.y.z\" and source = \"...\" are allowed"
                )
    return data


def _in_span(span: dict[str, Any], version: Version) -> bool:
    since, until = parse_version(span.get("since")), parse_version(span.get("until"))
    return not ((since and version < since) or (until and version > until))


def hand_table_says(engine: str | None, flag: str, version: str | None) -> bool | None:
    """The hand table's answer alone (None: it does not list the flag). An unknown version means the
    current release: a flag removed since then does not exist."""
    flags = _table().get(engine or "")
    if not flags:
        return None
    name = flag.split("=", 1)[0]
    span = flags.get(name)
    if span is None:
        return None
    ver = parse_version(version) if version else None
    if ver is None:
        ok = "until" not in span
        if "=" in flag and flag in flags:
            ok = ok and "until" not in flags[flag]
        return ok
    if not _in_span(span, ver):
        return False
    if "=" in flag and flag in flags:
        return _in_span(flags[flag], ver)
    return True


def flag_exists(engine: str | None, flag: str, version: str | None) -> bool | None:
    """True/False when it is known whether ``flag`` (``--name``, ``--name=value``, an environment
    variable or ``vllm serve``) exists in ``engine`` at ``version``; None when nothing tells.

    The generated parser data answers first (see the module docstring); the hand table answers only
    where that data is silent. An unknown version means the current release.
    """
    known = sampled(engine, flag, version)
    return known if known is not None else hand_table_says(engine, flag, version)
