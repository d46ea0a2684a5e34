"""Does a flag exist in the detected version of an engine? (``rules/advice/flags.toml``)

One function, :func:`flag_exists`, so that a fuller table (argparse flag lists read from the engines'
wheels) can replace the data behind it later without touching its callers.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any

from oomdoctor.advisor.memory_model import Version, parse_version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, dict[str, Any]]]:
    from oomdoctor.rulepack.loader import builtin_rules_dir

    data = tomllib.loads((builtin_rules_dir() / "advice" / "flags.toml").read_text("utf-8"))
    for engine, flags in data.items():
        for flag, span in flags.items():
            extra = set(span) - {"since", "until"}
            if extra or not all(parse_version(str(v)) for v in span.values()):
                raise ValueError(f"flags.toml: [{engine}] {flag!r}: only since/until = \"x.y.z\" are allowed")
    return data


def _in_span(span: dict[str, Any], version: Version) -> bool:
    since, until = parse_version(span.get("since")), parse_version(span.get("until"))
    return not ((since and version < since) or (until and version > until))


def flag_exists(engine: str | None, flag: str, version: str | None) -> bool | None:
    """True/False when the table knows whether ``flag`` (``--name`` or ``--name=value`` or an env
    variable) exists in ``engine`` at ``version``; None when the table does not know the flag.

    An unknown version means the current release: a flag removed since then does not exist.
    """
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
