"""A command the user runs by hand (``remedy.run``): its own line in every text format, data in
JSON, its label translated, never a ``key=value`` setting."""

from __future__ import annotations

import json
from pathlib import Path

import oomdoctor
from oomdoctor.i18n import use_lang
from oomdoctor.render.json import render_json
from oomdoctor.render.markdown import render_markdown
from oomdoctor.render.slack import render_slack_blocks
from oomdoctor.render.text import render_text
from oomdoctor.report import Remedy

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "fixtures/pytorch/seed-002.log"  # 22.35 GiB of 23.69 GiB held outside the process
COMMAND = "nvidia-smi --query-compute-apps=pid,used_memory --format=csv"


def _top(lang: str = "en") -> tuple[oomdoctor.Report, Remedy]:
    report = oomdoctor.diagnose(LOG.read_bytes(), lang=lang)
    top = report.findings[0].remedies[0]
    assert top.id == "gpu.free-other-processes"
    return report, top


def test_the_free_the_gpu_remedy_carries_a_command_not_a_setting() -> None:
    _report, top = _top()
    assert top.settings == {} and top.flags == {} and top.command is None
    assert [(s.label, s.command) for s in top.run] == [("list the processes holding GPU memory:", COMMAND)]


def test_text_puts_the_command_on_its_own_unwrapped_line() -> None:
    report, _top_remedy = _top()
    for width in (40, 80, 120):
        lines = render_text(report, width=width, color=False).splitlines()
        at = lines.index("       $ " + COMMAND)  # whole, even wider than a 40-column terminal
        if width > 40:  # the label is prose: it wraps like the rest
            assert lines[at - 1] == "     list the processes holding GPU memory:"
        assert not any("=nvidia-smi" in line for line in lines)


def test_markdown_and_slack_show_it_as_code() -> None:
    report, _top_remedy = _top()
    assert f"   - list the processes holding GPU memory: `{COMMAND}`" in render_markdown(report).splitlines()
    slack = json.dumps(render_slack_blocks(report), ensure_ascii=False)
    assert f"list the processes holding GPU memory: `{COMMAND}`" in slack
    assert "=nvidia-smi" not in slack


def test_json_carries_it_as_data() -> None:
    report, _top_remedy = _top()
    remedy = json.loads(render_json(report))["findings"][0]["remedies"][0]
    assert remedy["run"] == [{"label": "list the processes holding GPU memory:", "command": COMMAND}]
    assert json.loads(render_json(report))["schema_version"] >= 3  # remedy.run came with 3


def test_the_label_is_translated_and_the_command_is_not() -> None:
    report, top = _top("ja")
    assert [(s.label, s.command) for s in top.run] == [("GPUメモリを使っているプロセスを一覧する：", COMMAND)]
    with use_lang("ja"):
        text = render_text(report, width=80, color=False)
    assert "     GPUメモリを使っているプロセスを一覧する：\n       $ " + COMMAND + "\n" in text
