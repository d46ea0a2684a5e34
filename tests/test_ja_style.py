"""One typographic style for every Japanese text (CONTRIBUTING.md, "Japanese style"), checked on
every template: the gettext catalog, the rules' ``ja`` entries, the cause and remedy texts, the
product names and the model catalog.

- Spaces: no space between a full-width character and a half-width one, in either order
  (``GPUの23.56 GiB``, ``--enforce-eagerを指定``, ``メモリ不足エラー1件``); half-width words keep
  the spaces between them (``23.56 GiB``, ``--max-model-len 8192``), and an arithmetic operator
  keeps its spaces (``（使用中 + 空き）/ 合計``).
- Colons: the full-width colon ``：`` with no space after it; a half-width ``:`` only inside code
  (``expandable_segments:True``, a placeholder's ``{x:size}``, ``path:line``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import i18n_catalog  # noqa: E402

#: arithmetic, markup and the ' · ' separator keep a space on each side, next to Japanese too
OPERATORS = frozenset("+−×÷/=<>|~*→≤≥·")


def full_width(ch: str) -> bool:
    """Kana, kanji and full-width forms (brackets, punctuation, ``：``)."""
    n = ord(ch)
    return (0x3000 <= n <= 0x30FF or 0x3400 <= n <= 0x4DBF or 0x4E00 <= n <= 0x9FFF or 0xFF01 <= n <= 0xFF60)


def spacing_problems(text: str) -> list[str]:
    """Each space that stands between a full-width and a half-width character (an operator's
    spaces excepted), with the text around it."""
    out = []
    for i in range(1, len(text) - 1):
        if text[i] != " ":
            continue
        left, right = text[i - 1], text[i + 1]
        if full_width(left) != full_width(right) and not (left in OPERATORS or right in OPERATORS):
            out.append(text[max(0, i - 12): i + 12])
    return out


#: a prose colon: half-width, after a full-width character or before one (across a space), or at the end
_HALF_COLON = re.compile(r":(?= |$)|(?<=[^\x00-\x7f]):|:(?= ?[^\x00-\x7f])")


#: code quoted in a text: 'Authorization: Bearer <token>', `medium: Memory`, 「GPU KV cache size: 5 tokens」
_QUOTED_CODE = re.compile(r"'[^']*'|`[^`]*`|「[\x00-\x7f]*」")


def colon_problems(text: str) -> list[str]:
    """Each prose colon that is half-width (quoted code aside), and each full-width colon followed
    by a space."""
    text = _QUOTED_CODE.sub("''", text)
    out = [text[max(0, m.start() - 12): m.end() + 12] for m in _HALF_COLON.finditer(text)]
    out += [text[max(0, m.start() - 12): m.end() + 12] for m in re.finditer("： ", text)]
    return out


def _ja_values(node: Any) -> Iterator[str]:
    """Every string under ``ja`` keys of a TOML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "ja":
                yield from _strings(value)
            else:
                yield from _ja_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _ja_values(item)


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def japanese_templates() -> list[tuple[str, str]]:
    """(where, text) for every Japanese template the tool can print."""
    out = [(f"oomdoctor.po: {msgid!r}", text)
           for msgid, text in i18n_catalog.translated(i18n_catalog.po_files()[0]).items() if msgid and text]
    for path in [*sorted((ROOT / "rules").rglob("*.toml")), *sorted((ROOT / "oomdoctor" / "data").glob("*.toml"))]:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        out += [(str(path.relative_to(ROOT)), text) for text in _ja_values(doc)]
    return out


def test_the_scan_sees_every_kind_of_template() -> None:
    where = {w.split(":")[0] for w, _t in japanese_templates()}
    for name in ("oomdoctor.po", "rules/advice/remedies.toml", "rules/advice/causes.toml", "rules/vllm.toml",
                 "rules/products.toml", "oomdoctor/data/models.toml"):
        assert name in where, name
    assert len(japanese_templates()) > 900


def test_no_space_between_full_width_and_half_width() -> None:
    bad = [f"{where}: …{snip}…" for where, text in japanese_templates() for snip in spacing_problems(text)]
    assert bad == [], "\n".join(bad)


def test_one_colon_style() -> None:
    bad = [f"{where}: …{snip}…" for where, text in japanese_templates() for snip in colon_problems(text)]
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize(
    ("text", "spaces", "colons"),
    [
        ("GPUの23.56 GiBのうち", 0, 0),
        ("GPUの 23.56 GiB", 1, 0),
        ("--gpu NAME を指定", 1, 0),
        ("（使用中 + 空き）/ 合計 = {x}", 0, 0),
        ("理由：PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", 0, 0),
        ("理由: 何か", 1, 1),
        ("理由： 何か", 0, 1),
        ("{path}: 読めません", 1, 1),
        ("{size:size}の空き", 0, 0),
        ("ヘッダー'Authorization: Bearer <token>'を送る", 0, 0),
    ],
)
def test_the_checks_themselves(text: str, spaces: int, colons: int) -> None:
    assert (len(spacing_problems(text)), len(colon_problems(text))) == (spaces, colons)
