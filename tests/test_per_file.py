"""Each input is its own run: one file's facts never reach another file's diagnosis.

``oomdoctor a.log b.log`` diagnoses each file with a scanner of its own and joins the reports; the
JSON report holds one context per file (``contexts``), and every finding says its file
(``location.source``). The diagnosis of a file among others must equal its diagnosis alone: its
findings and its context, compared per file (:func:`per_file`).

The default test pairs every fixture once with a fixture of another engine (a fixed rotation,
both orders); ``-m slow`` runs every pair.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import oomdoctor
from oomdoctor.cli.diagnose import run
from oomdoctor.render.markdown import render_markdown
from oomdoctor.render.text import render_text
from oomdoctor.report import Context, SourceContext, combine_reports, common_context
from tests.corpus import FIXTURES

LOGS = sorted(FIXTURES.glob("*/*.log"), key=lambda p: (p.parent.name, p.name))
NAMES = [f"{p.parent.name}/{p.name}" for p in LOGS]


def engine_of(name: str) -> str:
    return name.split("/", 1)[0]


def rotation(names: list[str]) -> list[tuple[str, str]]:
    """Every name once with a partner of another engine (the name half the list further on, or
    the next one after it of another engine), every other pair in the opposite order."""
    n = len(names)
    half = (n + 1) // 2
    pairs = []
    for i in range(half):
        j = (i + half) % n
        while engine_of(names[j]) == engine_of(names[i]):
            j = (j + 1) % n
        pairs.append((names[i], names[j]) if i % 2 == 0 else (names[j], names[i]))
    return pairs


PAIRS = rotation(NAMES)


@contextlib.contextmanager
def cwd(path: Path) -> Iterator[None]:
    """In ``path`` (``contextlib.chdir`` is Python 3.11's)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def cli_report(names: list[str], tmp_path: Path) -> dict[str, Any]:
    """The JSON report of ``oomdoctor -f json NAME...``, run in the fixtures directory."""
    out = tmp_path / "report.json"
    with cwd(FIXTURES), contextlib.redirect_stderr(io.StringIO()):
        code = run(names, fmt="json", output=str(out))
    assert code in (0, 1), code
    return json.loads(out.read_text())


def per_file(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each source's diagnosis: its findings and its context (less the ``source`` key)."""
    assert [c["source"] for c in report["contexts"]] == report["sources"], "one context per source, in order"
    assert {f["location"]["source"] for f in report["findings"]} <= set(report["sources"])
    return {
        c["source"]: {
            "findings": [f for f in report["findings"] if f["location"]["source"] == c["source"]],
            "context": {k: v for k, v in c.items() if k != "source"},
        }
        for c in report["contexts"]
    }


_ALONE: dict[str, dict[str, Any]] = {}


def alone(name: str, tmp_path: Path) -> dict[str, Any]:
    if name not in _ALONE:
        report = cli_report([name], tmp_path)
        (mine,) = per_file(report).values()
        assert report["context"] == mine["context"], "one file: the report's context is the file's"
        _ALONE[name] = mine
    return _ALONE[name]


def check_together(names: list[str], tmp_path: Path) -> None:
    together = per_file(cli_report(names, tmp_path))
    assert list(together) == names
    for name in names:
        assert together[name] == alone(name, tmp_path), f"{name} is diagnosed otherwise beside {names}"


def test_the_rotation_covers_every_fixture_with_another_engine() -> None:
    assert {n for pair in PAIRS for n in pair} == set(NAMES)
    assert all(engine_of(a) != engine_of(b) for a, b in PAIRS)
    assert any(a < b for a, b in PAIRS) and any(a > b for a, b in PAIRS)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "+".join(p))
def test_a_file_among_others_is_diagnosed_as_alone(pair: tuple[str, str], tmp_path: Path) -> None:
    check_together(list(pair), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted({engine_of(n) for n in NAMES}))
def test_every_pair_is_diagnosed_as_alone(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Every fixture of ``engine`` beside every fixture listed after it (about 32 000 pairs)."""
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("every pair of fixtures: run with -m slow")
    for i, first in enumerate(NAMES):
        if engine_of(first) == engine:
            for second in NAMES[i + 1 :]:
                check_together([first, second], tmp_path)


def test_llamacpp_beside_vllm_keeps_its_engine_and_gets_no_vllm_command(tmp_path: Path) -> None:
    # the case: the llama.cpp failure came out as engine vllm, with a vllm serve command
    names = ["llamacpp/other-001.log", "vllm/vllm-054.log", "pytorch/new-009.log"]
    report = cli_report(names, tmp_path)
    by_source = {f["location"]["source"]: f for f in report["findings"]}
    assert by_source["llamacpp/other-001.log"]["engine"] == "llama.cpp"
    assert by_source["pytorch/new-009.log"]["engine"] == "pytorch"
    for name in ("llamacpp/other-001.log", "pytorch/new-009.log"):
        commands = [r.get("command") or "" for r in by_source[name]["remedies"]]
        assert not any("vllm" in c for c in commands), (name, commands)
        assert not any(r["id"].startswith("vllm.") for r in by_source[name]["remedies"]), name
    engines = {c["source"]: c["engine"] for c in report["contexts"]}
    assert engines == {"llamacpp/other-001.log": "llama.cpp", "vllm/vllm-054.log": "vllm", "pytorch/new-009.log": None}
    # the top-level context holds only what every file states alike: here, no engine
    assert report["context"]["engine"] is None
    assert report["summary"]["errors"] == sum(f["severity"] == "error" for f in report["findings"])


def test_the_same_file_twice_is_two_runs_with_the_same_diagnosis(tmp_path: Path) -> None:
    name = "vllm/vllm-054.log"
    report = cli_report([name, name], tmp_path)
    assert report["sources"] == [name, name]
    assert len(report["contexts"]) == 2 and report["contexts"][0] == report["contexts"][1]
    assert len(report["findings"]) == 2 * len(alone(name, tmp_path)["findings"])
    assert report["context"] == alone(name, tmp_path)["context"]


def test_python_api_calls_share_nothing() -> None:
    vllm = (FIXTURES / "vllm" / "vllm-054.log").read_bytes()
    llama = (FIXTURES / "llamacpp" / "other-001.log").read_bytes()
    first = oomdoctor.diagnose(llama, source="x.log").model_dump(mode="json")
    oomdoctor.diagnose(vllm, source="x.log")
    again = oomdoctor.diagnose(llama, source="x.log").model_dump(mode="json")
    assert again == first
    assert [c["source"] for c in first["contexts"]] == ["x.log"]


def test_common_context_keeps_only_facts_every_source_states_alike() -> None:
    a = Context(engine="vllm", model="m", gpu_total_bytes=1 << 30, launch_args={"x": "1", "y": "2"})
    b = Context(engine="vllm", model="n", launch_args={"x": "1", "y": "3"})
    common = common_context([a, b])
    assert common.engine == "vllm"
    assert common.model is None and common.gpu_total_bytes is None
    assert common.launch_args == {"x": "1"}
    assert common_context([a]) == a
    assert common_context([]) == Context()


def test_source_context_round_trips_the_typed_arguments() -> None:
    ctx = Context(engine="vllm", launch_args={"max_model_len": "4096"})
    ctx.typed_args["max_model_len"] = "4096"
    sc = SourceContext.of("a.log", ctx)
    assert sc.source == "a.log" and sc.engine == "vllm"
    assert sc.typed_args == {"max_model_len": "4096"}
    assert sc.facts() == ctx and sc.facts().typed_args == ctx.typed_args
    assert next(iter(sc.model_dump())) == "source"  # first in the JSON


def _two() -> oomdoctor.Report:
    reports = [
        oomdoctor.diagnose((FIXTURES / name).read_bytes(), source=name)
        for name in ("llamacpp/other-001.log", "vllm/vllm-054.log")
    ]
    return oomdoctor.combine_reports(reports)


def test_combine_reports_adds_up_and_keeps_each_context() -> None:
    report = _two()
    assert report.sources == ["llamacpp/other-001.log", "vllm/vllm-054.log"]
    assert [c.source for c in report.contexts] == report.sources
    assert report.context_of("vllm/vllm-054.log").engine == "vllm"
    assert report.context_of("llamacpp/other-001.log").engine == "llama.cpp"
    assert report.summary.errors == sum(f.severity == "error" for f in report.findings)
    with pytest.raises(ValueError):
        combine_reports([])


def test_text_groups_findings_under_each_file_with_its_facts() -> None:
    text = render_text(_two(), width=100)
    llama = text.index("== llamacpp/other-001.log · llama.cpp ==")
    vllm = text.index("== vllm/vllm-054.log · vllm")
    assert llama < text.index("llamacpp/other-001.log:4") < vllm < text.index("vllm/vllm-054.log:4")
    assert text.rstrip().splitlines()[-3].startswith("llamacpp/other-001.log: ")


def test_markdown_has_a_section_per_file() -> None:
    md = render_markdown(_two())
    llama = md.index("## `llamacpp/other-001.log`: ")
    vllm = md.index("## `vllm/vllm-054.log`: ")
    assert llama < md.index("llamacpp/other-001.log:4") < vllm
    # a size limit still drops whole findings and says how many
    short = render_markdown(_two(), max_chars=1500)
    assert len(short) <= 1501 and "more finding(s) not shown" in short


def test_one_file_reads_as_before() -> None:
    report = oomdoctor.diagnose((FIXTURES / "vllm" / "vllm-054.log").read_bytes(), source="a.log")
    assert "== " not in render_text(report)
    assert "## `" not in render_markdown(report)


def test_scanners_of_one_pack_share_only_what_the_pack_gives() -> None:
    """A scanner takes the indexes and prefilters an earlier scanner derived from the same pack;
    everything else, run state, memos and lists it reorders, is its own."""
    from oomdoctor import scanner as scanner_mod
    from oomdoctor.rulepack import default_pack

    pack = default_pack()
    first = scanner_mod.Scanner(pack, source="a.log")
    first.feed((FIXTURES / "vllm" / "vllm-054.log").read_bytes())
    first.close()
    second = scanner_mod.Scanner(pack, source="b.log")
    assert vars(first).keys() == vars(second).keys()
    shared = (set(scanner_mod._DERIVED_NAMES) - scanner_mod._MEMOS - scanner_mod._REORDERED) | {"pack"}
    mutable = (list, dict, set, bytearray)
    for name, value in vars(second).items():
        if name in shared:
            assert value is getattr(first, name), name
        elif isinstance(value, mutable) or hasattr(value, "__dict__"):
            assert value is not getattr(first, name), f"{name} is shared between two scans"
    assert second.context() == Context() and second.findings_so_far() == 0
