"""TGI's flags: a hand table (its launcher is Rust on crates.io, out of reach), each flag with the
release its citation shows it in and the citation; every TGI flag and command checked against it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from oomdoctor.advisor.versions import _table, flag_exists
from oomdoctor.api import diagnose

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def test_every_tgi_flag_carries_a_release_and_a_citation() -> None:
    raw = tomllib.loads((ROOT / "rules/advice/flags.toml").read_text("utf-8"))["tgi"]
    assert set(raw) == set(_table()["tgi"])
    for flag, span in raw.items():
        assert span.get("source"), flag
        assert span.get("since") or span.get("seen"), flag


def _tgi_reports() -> list[tuple[str, object]]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.log")):
        report = diagnose(path.read_text(encoding="utf-8", errors="replace"), source=str(path))
        if report.context.engine == "tgi":
            out.append((path.name, report))
    return out


def test_every_tgi_flag_and_command_of_the_fixtures_is_in_the_table() -> None:
    seen_flags: set[str] = set()
    for name, report in _tgi_reports():
        for f in report.findings:  # type: ignore[attr-defined]
            for r in f.remedies:
                for flag in r.flags:
                    seen_flags.add(flag)
                    assert flag_exists("tgi", flag, report.context.engine_version) is True, (name, r.id, flag)  # type: ignore[attr-defined]
                if r.command:
                    argv = shlex.split(r.command)
                    assert argv[0] == "text-generation-launcher", (name, r.command)
                    assert all(flag_exists("tgi", t, None) is not False for t in argv if t.startswith("--"))
    assert seen_flags >= {"--cuda-memory-fraction", "--max-batch-prefill-tokens", "--max-input-tokens"}


def test_a_logged_launcher_line_gives_the_corrected_command() -> None:
    log = "$ text-generation-launcher --model-id mistralai/Mixtral-8x7B-Instruct-v0.1 --num-shard 2 " \
          "--max-input-tokens 8000 --max-total-tokens 8192 --max-batch-prefill-tokens 8192\n"
    log += (FIXTURES / "tgi/synthetic-warmup-prefill-oom.log").read_text(encoding="utf-8")
    top = diagnose(log).findings[0].remedies[0]
    assert top.flags == {"--max-batch-prefill-tokens": "4096", "--max-input-tokens": "4096"}
    assert top.command == (
        "text-generation-launcher --model-id mistralai/Mixtral-8x7B-Instruct-v0.1 --num-shard 2 "
        "--max-input-tokens 4096 --max-total-tokens 8192 --max-batch-prefill-tokens 4096")


def test_no_command_with_a_flag_the_version_lacks() -> None:
    from oomdoctor.advisor.command import corrected_command
    from oomdoctor.report import Context, Remedy

    argv = ["text-generation-launcher", "--model-id", "m", "--max-input-length", "8000"]
    remedy = Remedy(id="x", title="t", flags={"--max-input-tokens": "4096"})
    assert corrected_command(Context(command=argv, engine="tgi", engine_version="1.4.5"), remedy) is None
    assert corrected_command(Context(command=argv, engine="tgi", engine_version="2.0.1"), remedy) == (
        "text-generation-launcher --model-id m --max-input-tokens 4096")  # the old name replaced in place
