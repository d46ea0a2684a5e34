"""A net for untranslated text (issue 18): every fixture's report, rendered in Japanese as text,
markdown and Slack, holds no English sentence of oomdoctor's own.

What may stay English is what the report takes from elsewhere or names: text echoed from the log
(the message, figure values), flags and their values, environment variables, setting names,
commands, paths. Everything else that reads as an English sentence (three or more words, two of
them lower-case words) has a translation source and must not appear: a remedy setting such as
``batch_size=half of the current value`` or a catalog note is caught here.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.i18n import use_lang
from oomdoctor.render import text as T
from oomdoctor.render.markdown import render_markdown
from oomdoctor.render.slack import render_slack_blocks
from oomdoctor.report import Report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(ROOT.glob("fixtures/*/*.log"))
#: a run of three or more words of Latin letters
WORDS = re.compile(r"\b[A-Za-z][A-Za-z'-]*(?:[ ,]+[A-Za-z][A-Za-z'-]*){2,}")
#: code spans and blocks (markdown, Slack): commands and flags, never prose
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def english_sentences(rendered: str, known: str) -> list[str]:
    """The English sentences of ``rendered`` that are not part of ``known`` (the log, figures,
    flags, setting names and commands, whitespace-free, so a wrapped echo still counts)."""
    out = []
    for line in CODE.sub("\0", rendered).splitlines():
        if line.strip().startswith("$ "):  # a command line of the text renderer
            continue
        for cell in re.split(r" {2,}|\||\\n", line):  # columns of a figure table, Slack's escaped newlines
            for match in WORDS.findall(cell):
                lower = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]*", match) if w.islower() and len(w) > 1]
                if len(lower) >= 2 and re.sub(r"\s", "", match) not in known:
                    out.append(match)
    return out


@cache
def _report(log: Path) -> Report:
    return oomdoctor.diagnose(log.read_bytes(), source=str(log.relative_to(ROOT)), lang="ja")


def _known(log: Path, report: Report) -> str:
    parts = [log.read_bytes().decode("utf-8", "replace")]
    for f in report.findings:
        parts += [f.message, *(str(v) for v in f.figures.values())]
        for r in f.remedies:
            parts += [*r.flags, *r.flags.values(), *r.env, *r.env.values(), *r.settings, r.command or ""]
    return re.sub(r"\s", "", "\n".join(parts))


RENDERERS = {
    "text": lambda r: T.render_text(r, width=10_000),  # one line per paragraph: no wrapped sentence is missed
    "markdown": render_markdown,
    "slack": lambda r: json.dumps(render_slack_blocks(r), ensure_ascii=False, indent=1),
}


@pytest.mark.parametrize("fmt", list(RENDERERS))
def test_no_english_sentence_is_left_in_japanese_reports(fmt: str) -> None:
    leaks: dict[str, list[str]] = {}
    found = 0
    for log in FIXTURES:
        report = _report(log)
        found += len(report.findings)
        with use_lang(report.lang):
            rendered = RENDERERS[fmt](report)
        if leak := english_sentences(rendered, _known(log, report)):
            leaks[log.name] = leak
    assert found > 150  # the net went over real reports
    assert leaks == {}


def test_the_net_catches_english_and_lets_echoed_text_through() -> None:
    known = re.sub(r"\s", "", "CUDA out of memory. Tried to allocate 2.00 GiB --max-model-len list GPU processes")
    assert english_sentences("  batch_size=half of the current value", known) == ["half of the current value"]
    assert english_sentences("カタログ：config.json of Qwen/Qwen3-8B（MLA）", known) == ["json of Qwen"]
    assert english_sentences("  CUDA out of\n  memory. Tried to allocate 2.00 GiB", known) == []  # echoed, wrapped
    assert english_sentences("  list GPU processes=nvidia-smi", known) == []  # a setting name
    assert english_sentences("使い方: `vllm serve the model --max-model-len 4096`", known) == []  # code
    assert english_sentences("  preemption_mode  RECOMPUTE\n  $ vllm serve my own model", known) == []
    assert english_sentences("KVキャッシュをfp8で保持する（max_batch_total_tokensが下がる）", known) == []


def test_no_setting_value_is_english_prose() -> None:
    """A remedy's setting value is a value (``4``, ``cpu``, ``low_cpu_mem_usage=True``) or words in
    the report's language (a command inside, such as ``docker run``, may stay); two or more English
    words and nothing Japanese ("at least 2 GiB") are a missed translation, however short."""
    prose = {}
    for log in FIXTURES:
        for f in _report(log).findings:
            for r in f.remedies:
                for name, value in r.settings.items():
                    words = [w for w in re.split(r"[\s,;]+", value) if re.fullmatch(r"[a-z]{2,}", w)]
                    if len(words) >= 2 and T.cell_len(value) == len(value):  # English words, no Japanese
                        prose[f"{log.name} {r.id} {name}"] = value
    assert prose == {}


#: the "now" column of issue 37's native review: none may come back in a Japanese report
REVIEWED_AWAY = [
    "メモリ不足の失敗", "代償", "効果の可能性あり", "確度", "これで収まる", "個のランク", "GPU総量", "満杯です",
    "GPUは満杯", "が入りません", "より小さなバッチでプロファイル", "キャプチャを省く", "4ビット量子化（AWQまたはGPTQ）",
    "プレフィル", "PyTorch外", "PyTorch以外", "シーケンス1本", "（hint）", "vLLM外", "前提情報", "unknown",
]
#: labels that wrapping must never split across two lines
LABELS = ["場所", "製品", "エンジン", "フェーズ", "原因", "理由", "トレードオフ", "信頼度", "要求量", "GPU総容量"]


def _ja_cli(*args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "oomdoctor", "--lang", "ja", *args], capture_output=True, cwd=ROOT,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"})
    return done.stdout.decode() + done.stderr.decode()


def test_the_native_review_wording_is_in_every_japanese_report() -> None:
    """No wording the review replaced is printed by any fixture's report (text, markdown, at 80
    columns and unwrapped), by fit or by --help; and at 80 columns no label is split across lines."""
    seen: dict[str, list[str]] = {}
    split: dict[str, list[str]] = {}
    for log in FIXTURES:
        report = _report(log)
        with use_lang("ja"):
            wide, narrow = T.render_text(report, width=10_000), T.render_text(report, width=80)
            rendered = wide + narrow + render_markdown(report)
        echoed = {f.message for f in report.findings}
        lines = [line for line in rendered.splitlines() if not any(m and m[:60] in line for m in echoed)]
        if old := [s for s in REVIEWED_AWAY if any(s in line for line in lines)]:
            seen[log.name] = old
        if cut := [label for label in LABELS if wide.count(label) != narrow.count(label)]:
            split[log.name] = cut
    for args in (["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A10G"],
                 ["fit", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "A10G", "--gpus", "2"], ["--help"]):
        out = _ja_cli(*args)
        if old := [s for s in REVIEWED_AWAY if s in out]:
            seen[" ".join(args)] = old
    assert seen == {}
    assert split == {}
