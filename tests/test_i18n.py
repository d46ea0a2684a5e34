"""Explanations in the user's language (issue 18): the choice of language, translations that are
complete and keep every placeholder, Japanese goldens, and JSON that differs only in human text.

``--update-goldens`` rewrites the Japanese goldens under tests/snapshots/ja/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import oomdoctor
from oomdoctor.advisor import prescription
from oomdoctor.i18n import LOCALE_DIR, current_lang, normalize, resolve_lang, use_lang
from oomdoctor.render import text as T
from oomdoctor.render.markdown import render_markdown
from oomdoctor.render.slack import render_slack_blocks

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = Path(__file__).resolve().parent / "snapshots" / "ja"
#: vLLM weights, vLLM KV cache, the PyTorch CUDA OOM quoted at the top of the Japanese guide,
#: a training OOM (DeepSpeed ZeRO-2) and a host OOM (the kernel's OOM killer)
CASES = ["vllm/seed-001", "vllm/vllm-001", "pytorch/seed-002", "deepspeed/synthetic-zero2-oom", "other/new-052"]

sys.path.insert(0, str(ROOT / "tools"))
import i18n_catalog  # noqa: E402


def _log(case: str) -> Path:
    return ROOT / "fixtures" / f"{case}.log"


def _report(case: str, lang: str) -> oomdoctor.Report:
    return oomdoctor.diagnose(_log(case).read_bytes(), source=f"{case}.log", lang=lang)


# -- the choice of language ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, "en"),
        ({"LANG": "ja_JP.UTF-8"}, "ja"),
        ({"LANG": "C.UTF-8"}, "en"),
        ({"LC_ALL": "en_US.UTF-8", "LANG": "ja_JP.UTF-8"}, "en"),  # LC_ALL wins over LANG
        ({"LC_MESSAGES": "ja_JP.eucJP", "LANG": "en_US.UTF-8"}, "ja"),
        ({"OOMDOCTOR_LANG": "ja", "LC_ALL": "C"}, "ja"),  # oomdoctor's own variable wins over the locale
        ({"OOMDOCTOR_LANG": "xx", "LANG": "ja_JP.UTF-8"}, "ja"),  # an unknown value is no choice
        ({"LANG": "fr_FR.UTF-8"}, "en"),
    ],
)
def test_the_language_comes_from_the_environment(env: dict[str, str], want: str) -> None:
    assert resolve_lang(None, env) == want


def test_an_explicit_language_wins_and_must_be_known() -> None:
    assert resolve_lang("ja", {"OOMDOCTOR_LANG": "en"}) == "ja"
    assert resolve_lang("en", {"LANG": "ja_JP.UTF-8"}) == "en"
    assert normalize("ja-JP") == "ja"
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        resolve_lang("fr")


def test_use_lang_is_scoped() -> None:
    assert current_lang() == "en"
    with use_lang("ja"):
        assert current_lang() == "ja"
    assert current_lang() == "en"


def test_the_report_carries_its_language() -> None:
    assert _report("vllm/seed-001", "en").lang == "en"
    ja = _report("vllm/seed-001", "ja")
    assert ja.lang == "ja"
    assert ja.findings[0].cause is not None
    assert ja.findings[0].cause.summary == "モデルの重みがGPUのメモリ予算に収まりません。"
    assert current_lang() == "en"  # diagnose() does not leak its language


# -- translations: complete, and no figure can change ------------------------------------------------


def test_every_advice_text_has_its_japanese() -> None:
    assert prescription.untranslated("ja") == []


def test_every_code_text_has_its_japanese_and_the_mo_is_current() -> None:
    pos = i18n_catalog.po_files()
    assert [p.parent.parent.name for p in pos] == ["ja"]
    assert i18n_catalog.problems(pos[0]) == []
    assert (LOCALE_DIR / "ja" / "LC_MESSAGES" / "oomdoctor.mo").exists()


def test_the_catalog_check_finds_missing_stale_and_changed_placeholders(tmp_path: Path) -> None:
    po = pos = i18n_catalog.po_files()[0]
    entries = i18n_catalog.read_po(pos)
    messages = {k: ["x.py:1"] for k in entries if k}
    broken = dict(entries)
    del broken["Why:"]  # missing
    broken["stale message"] = "古い"  # stale
    broken["saves {size}"] = "削減"  # placeholder dropped
    broken["line {span}"] = "{span}行目{extra}"  # placeholder added
    lang_dir = tmp_path / "ja" / "LC_MESSAGES"
    lang_dir.mkdir(parents=True)
    po = lang_dir / "oomdoctor.po"
    po.write_text(
        "\n".join(f"msgid {i18n_catalog._quote(k)}\nmsgstr {i18n_catalog._quote(v)}\n" for k, v in broken.items()),
        "utf-8",
    )
    old_root = i18n_catalog.ROOT
    i18n_catalog.ROOT = tmp_path
    try:
        found = "\n".join(i18n_catalog.problems(po, messages))
    finally:
        i18n_catalog.ROOT = old_root
    assert "no translation of 'Why:'" in found
    assert "stale entry 'stale message'" in found
    assert "'saves {size}': placeholders [] differ from ['size:']" in found
    assert "'line {span}': placeholders ['extra:', 'span:'] differ from ['span:']" in found
    assert "is not compiled" in found


def _cause_toml(summary: list[str], ja: list[str]) -> str:
    q = json.dumps
    return "".join(
        f'[[cause]]\nid = "{c}"\nsummary = [{q(summary[0]) if c == "host-ram" else q("x")}]\n'
        + (f"ja.summary = [{q(ja[0])}]\n" if c == "host-ram" else "")
        for c in prescription.CAUSES
    )


@pytest.mark.parametrize(
    ("ja", "error"),
    [
        ("ホストのRAMが尽きました。", r"placeholders \[\] differ from the English \['rss:size'\]"),  # dropped
        ("{rss:size}と{limit:size}。", r"placeholders \['limit:size', 'rss:size'\] differ"),  # added
        ("{rss}を使っていました。", r"placeholders \['rss'\] differ from the English \['rss:size'\]"),  # reformatted
    ],
)
def test_the_loader_rejects_a_translation_that_changes_a_placeholder(tmp_path: Path, ja: str, error: str) -> None:
    path = tmp_path / "causes.toml"
    path.write_text(_cause_toml(["The host ran out of RAM; {rss:size} held."], [ja]), "utf-8")
    with pytest.raises(ValueError, match=error):
        prescription.load_table(path)
    path.write_text(_cause_toml(["The host ran out of RAM; {rss:size} held."], ["{rss:size}を使っていました。"]), "utf-8")
    assert prescription.load_table(path)["host-ram"].ja is not None


def test_the_loader_rejects_a_remedy_translation_with_other_keys(tmp_path: Path) -> None:
    path = tmp_path / "remedies.toml"
    path.write_text(
        '[remedy."host.add-swap"]\ntradeoff = "Slow."\ntext.title = "Add {gib} GiB of swap"\n'
        'ja.title = "スワップを{gib} GiB追加する"\n',
        "utf-8",
    )
    with pytest.raises(ValueError, match="keys"):
        prescription.load_remedy_table(path)  # ja.tradeoff is missing
    path.write_text(
        '[remedy."host.add-swap"]\ntext.title = "Add {gib} GiB of swap"\nja.title = "スワップを追加する"\n', "utf-8"
    )
    with pytest.raises(ValueError, match=r"placeholders \[\] differ from the English \['gib'\]"):
        prescription.load_remedy_table(path)


# -- goldens in Japanese -------------------------------------------------------------------------------


def _renderings(case: str) -> dict[str, str]:
    report = _report(case, "ja")
    with use_lang(report.lang):
        return {
            "txt": T.render_text(report, width=80),
            "md": render_markdown(report),
            "slack.json": json.dumps(render_slack_blocks(report), ensure_ascii=False, indent=2) + "\n",
        }


@pytest.mark.parametrize("case", CASES)
def test_japanese_goldens(case: str, update_goldens: bool) -> None:
    for ext, got in _renderings(case).items():
        golden = GOLDENS / f"{case.replace('/', '-')}.{ext}"
        if update_goldens:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(got, encoding="utf-8")
        assert golden.exists(), f"no golden {golden.name}: run pytest tests/test_i18n.py --update-goldens"
        assert got == golden.read_text(encoding="utf-8"), golden.name


@pytest.mark.parametrize("case", CASES)
def test_japanese_text_fits_80_columns(case: str) -> None:
    lines = _renderings(case)["txt"].splitlines()
    codes = [line for line in lines if line.startswith(T.CODE) and not line.startswith(T.CODE + " ")]
    prose = [line for line in lines if line not in codes]
    too_wide = [line for line in prose if T.cell_len(line) > 80 and " " in line.strip()]
    assert too_wide == []
    # the wrapping is real: some Japanese prose needed more than one line
    assert any(T.cell_len(line) > 60 and any(T._wide(c) for c in line) for line in prose)


def test_wrapping_counts_wide_characters_twice_and_keeps_punctuation() -> None:
    text = "あいうえお、かきくけこ。さしすせそ"
    lines = T.wrap_cells(text, 12)
    assert lines == ["あいうえお、", "かきくけこ。", "さしすせそ"]
    assert all(T.cell_len(line) <= 12 for line in lines)
    assert T.wrap_cells("--max-model-len 8192を指定する", 10) == ["--max-model-len", "8192を指定", "する"]
    assert T.cell_len("KVキャッシュ") == 2 + 5 * 2


# -- the same output whichever way Japanese is chosen; JSON differs only in human text -------------------


def _cli(args: list[str], **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("OOMDOCTOR_LANG", "LC_ALL", "LC_MESSAGES", "LANG")}
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args], capture_output=True, env={**base, "COLUMNS": "80", **env},
        timeout=120, cwd=ROOT,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout.decode("utf-8")


@pytest.mark.parametrize("fmt", ["text", "json", "markdown", "slack"])
def test_lang_flag_and_locale_give_the_same_output(fmt: str) -> None:
    log = "fixtures/vllm/vllm-001.log"
    by_flag = _cli(["--lang", "ja", "-f", fmt, log])
    assert _cli(["-f", fmt, log], LANG="ja_JP.UTF-8") == by_flag
    assert _cli(["-f", fmt, log], OOMDOCTOR_LANG="ja", LANG="en_US.UTF-8") == by_flag
    assert "KVキャッシュ" in by_flag
    assert _cli(["--lang", "en", "-f", fmt, log], LANG="ja_JP.UTF-8") == _cli(["-f", fmt, log])


def test_an_unknown_lang_is_a_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "--lang", "xx", "fixtures/vllm/vllm-001.log"],
                          capture_output=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert b"unknown language 'xx'" in proc.stderr


#: the human text of a report; everything else is the same in every language (settings: see below)
HUMAN = {"summary", "title", "why", "tradeoff", "lang", "label"}  # label: a run step's


def _without_human_text(value: Any, parent: str = "") -> Any:
    if isinstance(value, dict):
        return {
            k: _without_human_text(v, k)
            for k, v in value.items()
            if not (k in HUMAN and isinstance(v, str) and parent in ("cause", "remedies", "findings", "run", ""))
            and not (k in ("settings", "env", "flags") and parent == "remedies")  # compared name by name below
        }
    if isinstance(value, list):
        return [_without_human_text(v, parent) for v in value]
    return value


@pytest.mark.parametrize("case", CASES)
def test_json_differs_from_english_only_in_human_text(case: str) -> None:
    en = json.loads(_report(case, "en").model_dump_json())
    ja = json.loads(_report(case, "ja").model_dump_json())
    assert (en["lang"], ja["lang"]) == ("en", "ja")
    assert _without_human_text(ja) == _without_human_text(en)
    # ... and the human text did change: the cause and every remedy
    for fe, fj in zip(en["findings"], ja["findings"], strict=True):
        assert fj["title"] != fe["title"], fe["rule"]
        if fe["cause"]:
            assert fj["cause"]["summary"] != fe["cause"]["summary"]
        for re_, rj in zip(fe["remedies"], fj["remedies"], strict=True):
            assert rj["title"] != re_["title"], re_["id"]
            # a change keeps its name; its value is the same unless it is prose ("half of the current value",
            # CUDA_VISIBLE_DEVICES "the index of an idle GPU ...")
            for field in ("flags", "env", "settings"):
                assert list(rj[field]) == list(re_[field])
                for name, value in re_[field].items():
                    assert (rj[field][name] != value) == _is_prose(value), (field, name, value, rj[field][name])


def _is_prose(value: str) -> bool:
    """Words, not a value: two or more lower-case words ("at least 2 GiB"; not a command line such
    as "nvidia-smi --query-compute-apps=pid,used_memory", nor "low_cpu_mem_usage=True")."""
    return len([w for w in value.replace(";", " ").replace(",", " ").split() if re.fullmatch(r"[a-z]{2,}", w)]) >= 2


# -- the server: lang on /v1/diagnose, a chat language per deployment ---------------------------------


def _client(**cfg: Any) -> Any:
    from fastapi.testclient import TestClient

    from oomdoctor.server.app import create_app
    from oomdoctor.server.config import ServerConfig

    return TestClient(create_app(ServerConfig(**cfg)))


def test_v1_diagnose_speaks_the_requested_language() -> None:
    log = _log("vllm/vllm-001").read_text("utf-8")
    c = _client()
    by_body = c.post("/v1/diagnose", json={"log": log, "lang": "ja"}).json()
    assert by_body["lang"] == "ja"
    assert by_body["findings"][0]["cause"]["summary"].startswith("KVキャッシュに入るのは4512トークン")
    assert by_body["findings"][0]["remedies"][0]["flags"] == {"--max-model-len": "4512"}
    by_query = c.post("/v1/diagnose?lang=ja", json={"log": log}).json()
    assert by_query == by_body
    by_header = c.post("/v1/diagnose", json={"log": log}, headers={"Accept-Language": "fr;q=0.9, ja-JP;q=0.8"}).json()
    assert by_header == by_body
    english = c.post("/v1/diagnose?lang=ja", json={"log": log, "lang": "en"}).json()  # the body wins
    assert english["lang"] == "en"
    md = c.post("/v1/diagnose?format=markdown&lang=ja", content=log.encode(), headers={"content-type": "text/plain"})
    assert "**この順に試してください：**" in md.text
    assert c.post("/v1/diagnose", json={"log": log, "lang": "fr"}).status_code == 422


def test_chat_answers_in_the_deployment_language() -> None:
    from oomdoctor.server.config import ConfigError, ServerConfig

    assert ServerConfig.from_env({"OOMDOCTOR_CHAT_LANG": "ja_JP.UTF-8"}).chat_lang == "ja"
    with pytest.raises(ConfigError, match="chat language"):
        ServerConfig.from_env({"OOMDOCTOR_CHAT_LANG": "fr"})
    c = _client(mattermost_token="mm-token", chat_lang="ja")
    log = _log("vllm/vllm-001").read_text("utf-8")
    r = c.post("/mattermost/commands", data={"token": "mm-token", "text": log})
    assert r.status_code == 200, r.text
    assert "KVキャッシュに入るのは4512トークン" in r.json()["text"]
    assert "vllm serveのフラグ：\n     ```shell\n     --max-model-len 4512\n" in r.json()["text"]
    help_text = c.post("/mattermost/commands", data={"token": "mm-token", "text": "help"}).json()["text"]
    assert help_text.startswith("コマンドの後に")


# -- every remedy calculator words its human text through a translated template ------------------------

ADVISOR = ROOT / "oomdoctor" / "advisor"
#: calls whose string arguments are keys or code-text messages, not English shown as is
_WORDING_CALLS = {"remedy_text", "_", "N_", "ngettext"}
_HUMAN_KWARGS = ("title", "why", "tradeoff")


def _calculator_modules() -> list[Path]:
    return sorted(ADVISOR.glob("remedies_*.py"))


def _english_literals(node: Any) -> list[str]:
    """String literals with words in ``node`` that reach the user as they are (not inside a
    wording call)."""
    import ast

    out: list[str] = []

    def walk(n: ast.AST) -> None:
        if isinstance(n, ast.Call):
            fn = n.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in _WORDING_CALLS:
                return
            if isinstance(fn, ast.Attribute) and fn.attr == "format":
                walk(fn.value)
                for k in n.keywords:
                    walk(k.value)
                return
        if isinstance(n, (ast.Compare, ast.Subscript)):
            return  # keys and comparisons, not text
        if isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str)):
            parts = [n] if isinstance(n, ast.Constant) else [v for v in n.values if isinstance(v, ast.Constant)]
            literal = "".join(str(v.value) for v in parts)
            if " " in literal.strip() and sum(c.isalpha() for c in literal) >= 3:  # words, not a key or a formula
                out.append(ast.unparse(n))
            return
        for child in ast.iter_child_nodes(n):
            walk(child)

    walk(node)
    return out


def test_every_remedy_calculator_words_its_text_through_a_translated_template() -> None:
    """title, why and tradeoff of every Remedy a calculator builds (and the local variables they are
    built from) come from remedy_text() or gettext, never from an English literal."""
    import ast

    found: list[str] = []
    for path in _calculator_modules():
        tree = ast.parse(path.read_text("utf-8"))
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            assigned: dict[str, list[ast.AST]] = {}
            for n in ast.walk(fn):
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    for t in targets:
                        for name in [e for e in ast.walk(t) if isinstance(e, ast.Name)]:
                            assigned.setdefault(name.id, []).append(n.value)
                if isinstance(n, ast.Return) and n.value is not None and isinstance(n.value, ast.Tuple):
                    # helpers that hand back (value, why, ...) tuples
                    for elt in n.value.elts:
                        found += [f"{path.name}:{n.lineno}: {s}" for s in _english_literals(elt)]
            for call in [n for n in ast.walk(fn) if isinstance(n, ast.Call)]:
                if not (isinstance(call.func, ast.Name) and call.func.id == "Remedy"):
                    continue
                for kw in call.keywords:
                    if kw.arg not in _HUMAN_KWARGS:
                        continue
                    exprs = [kw.value] + [
                        v for name in [e.id for e in ast.walk(kw.value) if isinstance(e, ast.Name)]
                        for v in assigned.get(name, [])
                    ]
                    for expr in exprs:
                        found += [f"{path.name}:{call.lineno}: {kw.arg}: {s}" for s in _english_literals(expr)]
    assert found == [], "\n".join(found)


def _key_options(node: Any) -> list[str]:
    """The literal keys an expression can give: "a", x if c else "b", ("a" if c else "b") + "_c"."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _key_options(node.body) + _key_options(node.orelse)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [a + b for a in _key_options(node.left) for b in _key_options(node.right)]
    return []  # computed (an f-string key): checked by the table's own completeness


def test_every_template_a_calculator_asks_for_exists_with_its_japanese() -> None:
    """Each remedy_text(ID, KEY) with literal arguments names a text of remedies.toml that has its ja."""
    import ast

    table = prescription.remedy_table()
    asked: set[tuple[str, str]] = set()
    for path in _calculator_modules():
        tree = ast.parse(path.read_text("utf-8"))
        consts = {
            t.id: n.value.value
            for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value.value, str)
        }
        for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
            if not (isinstance(call.func, ast.Name) and call.func.id == "remedy_text") or len(call.args) < 2:
                continue
            rid_node, key_node = call.args[:2]
            rid = rid_node.value if isinstance(rid_node, ast.Constant) else consts.get(getattr(rid_node, "id", ""))
            if isinstance(rid, str):
                asked |= {(rid, k) for k in _key_options(key_node)}
    assert len(asked) > 150  # the scan really sees the calculators
    missing = sorted(f"{rid}/{key}" for rid, key in asked if key not in table.get(rid, prescription.RemedyEntry()).english())
    untranslated = sorted(f"{rid}/{key}" for rid, key in asked if key not in table.get(rid, prescription.RemedyEntry()).ja)
    assert missing == [], missing
    assert untranslated == [], untranslated


def test_rules_and_run_messages_follow_the_locale() -> None:
    """The rules subcommand's summary and the CLI's errors are code texts: gettext, in the locale's language."""
    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
        base = {k: v for k, v in os.environ.items() if k not in ("OOMDOCTOR_LANG", "LC_ALL", "LC_MESSAGES", "LANG")}
        return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True,
                              env={**base, **env}, timeout=120, cwd=ROOT)

    listed = cli("rules", "list", LANG="ja_JP.UTF-8").stdout.decode("utf-8").splitlines()[-1]
    english = cli("rules", "list").stdout.decode("utf-8").splitlines()[-1]
    counts = [int(n) for n in english.replace(",", " ").split() if n.isdigit()]
    assert english == "{} rules, {} context rules, {} phase rules".format(*counts)
    assert listed == "ルール{}件、コンテキストルール{}件、フェーズルール{}件".format(*counts)
    missing = cli("rules", "show", "no.such-rule", OOMDOCTOR_LANG="ja")
    assert missing.returncode == 2
    assert "ID 'no.such-rule'のルールはありません" in missing.stderr.decode("utf-8")
    not_found = cli("run", "--", "/no/such/command", OOMDOCTOR_LANG="ja")
    assert not_found.returncode == 127
    assert "/no/such/command：コマンドが見つかりません" in not_found.stderr.decode("utf-8")


# -- fit in Japanese ------------------------------------------------------------------------------------


FIT = ["fit", "--model", "Llama-3.1-8B", "--gpu", "A10G"]


def test_fit_speaks_japanese_from_either_flag_place_and_the_locale(update_goldens: bool) -> None:
    """``oomdoctor fit --lang ja`` and ``oomdoctor --lang ja fit`` both work, and equal the locale's choice;
    the budget table's labels are translated and still line up (wide characters count two cells)."""
    after = _cli([*FIT, "--lang", "ja"])
    assert _cli(["--lang", "ja", *FIT]) == after
    assert _cli(["--lang=ja", *FIT]) == after
    assert _cli(FIT, LANG="ja_JP.UTF-8") == after
    assert _cli(["--lang", "en", *FIT], LANG="ja_JP.UTF-8") == _cli(FIT)
    golden = GOLDENS / "fit-llama-3.1-8b-a10g.txt"
    if update_goldens:
        golden.write_text(after, encoding="utf-8")
    assert after == golden.read_text(encoding="utf-8")
    table = [line for line in after.splitlines() if line.endswith((" GiB", " MiB"))]
    assert table[0].startswith("  GPUメモリ") and any(line.startswith("  KVキャッシュ") for line in table)
    # the sizes end in the same column although the labels mix narrow and wide characters
    ends = {T.cell_len(line) for line in table}
    assert len(ends) == 1, table


def test_fit_json_differs_from_english_only_in_human_text() -> None:
    en = json.loads(_cli([*FIT, "--format", "json"]))
    ja = json.loads(_cli([*FIT, "--format", "json", "--lang", "ja"]))
    assert [r["bytes"] for r in en["budget"]] == [r["bytes"] for r in ja["budget"]]
    assert ja["budget"][0]["term"] == "GPUメモリ" and en["budget"][0]["term"] == "GPU memory"
    assert set(en) == set(ja)


# -- rule titles: Japanese beside the English in the same TOML entry ---------------------------------------


def test_every_rule_title_has_its_japanese() -> None:
    """A rule added without ``ja.title`` fails here, naming its file and id."""
    import tomllib

    missing = []
    for path in sorted((ROOT / "rules").glob("*.toml")):
        for entry in tomllib.loads(path.read_text("utf-8")).get("rule", []):
            if not entry.get("ja", {}).get("title"):
                missing.append(f"{path.relative_to(ROOT)}: rule {entry.get('id')} has no ja.title")
    assert missing == [], "\n".join(missing)


def test_findings_and_rule_list_carry_the_japanese_title() -> None:
    from oomdoctor.rulepack import default_pack

    rule = next(r for r in default_pack().rules if r.id == "vllm.v0.kv-cache.max-len-exceeds")
    assert rule.rule.title_in("ja") == "最大モデル長のリクエスト1件をKVキャッシュに収められない"
    assert rule.rule.title_in("en") == "KV cache cannot hold one request of the model's max length"
    text = _cli(["--lang", "ja", "fixtures/vllm/vllm-001.log"])
    assert text.splitlines()[0].endswith(rule.rule.title_in("ja"))
    assert rule.rule.title_in("en") not in text


@pytest.mark.parametrize(("ja", "error"), [
    ('"{size}のKVキャッシュ"', "placeholders"),
    ('""', "empty"),
])
def test_the_rule_loader_rejects_a_bad_japanese_title(tmp_path: Path, ja: str, error: str) -> None:
    from oomdoctor.rulepack import RulePackError, load_pack

    source = (ROOT / "rules" / "vllm.toml").read_text("utf-8")
    start = source.index("[[rule]]")
    end = source.index("[[rule]]", start + 1)
    entry = source[start:end]
    entry = "\n".join(line for line in entry.splitlines() if not line.startswith("ja.title"))
    (tmp_path / "one.toml").write_text(
        entry.replace("\ntitle = ", f"\nja.title = {ja}\ntitle = ", 1).replace('id = "vllm.', 'id = "mine.', 1), "utf-8")
    with pytest.raises((RulePackError, ValueError), match=error):
        load_pack([tmp_path])


def test_cli_errors_before_the_options_are_read_follow_the_language() -> None:
    """Errors found before a command sets its language (a bad --format of run, a bad --format of the
    diagnose command) are worded in the language of the command line or the environment."""
    def err(*args: str, **env: str) -> str:
        base = {k: v for k, v in os.environ.items() if k not in ("OOMDOCTOR_LANG", "LC_ALL", "LC_MESSAGES", "LANG")}
        proc = subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True,
                              env={**base, **env}, timeout=120, cwd=ROOT)
        assert proc.returncode == 2
        return proc.stderr.decode("utf-8")

    assert "--exit-status 'x'は使えません" in err("run", "--exit-status", "x", "--", "true", LANG="ja_JP.UTF-8")
    assert "--exit-status 'x'は使えません" in err("--lang", "ja", "run", "--exit-status", "x", "--", "true")
    assert "unknown --exit-status 'x'" in err("run", "--lang", "en", "--exit-status", "x", "--", "true", LANG="ja_JP.UTF-8")
    assert "--format 'nope'は使えません" in err("-f", "nope", "fixtures/vllm/vllm-001.log", OOMDOCTOR_LANG="ja")


def test_a_leading_lang_applies_to_the_rules_subcommand() -> None:
    last = _cli(["--lang", "ja", "rules", "list"]).splitlines()
    assert last[-1].startswith("ルール") and any(line.endswith("KVキャッシュに使えるメモリが残っていない") for line in last)
    assert _cli(["--lang", "en", "rules", "list"], LANG="ja_JP.UTF-8") == _cli(["rules", "list"])


@pytest.mark.parametrize("args", [["--lang", "xx", "rules", "list"], ["--lang=xx", "rules", "list"]])
def test_an_unknown_leading_lang_before_rules_is_a_usage_error(args: list[str]) -> None:
    """``rules`` takes no --lang of its own, so main() checks the value it removes."""
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert proc.stderr.decode().splitlines() == ["oomdoctor: error: --lang: unknown language 'xx' (choose en, ja)"]


def test_figures_are_labelled_in_japanese_or_shown_by_their_key() -> None:
    """A figure with a label gets its translation; one without shows its JSON key, which stays
    English like every key, never a half-English phrase."""
    from oomdoctor.render.common import figure_label

    with use_lang("ja"):
        assert figure_label("gpu_index") == "GPU番号"
        assert figure_label("anon_rss_bytes") == "匿名RSS"
        assert figure_label("sglang_cuda_graph_bs") == "sglang_cuda_graph_bs"
    with use_lang("en"):  # English reads as before
        assert figure_label("gpu_index") == "gpu index"
        assert figure_label("sglang_cuda_graph_bs") == "sglang cuda graph bs"
    with use_lang("ja"):
        text = T.render_text(_report("pytorch/seed-002", "ja"), width=80, color=False)
    assert "GPU番号" in text and "gpu index" not in text


def test_the_catalog_reader_refuses_a_message_translated_twice(tmp_path: Path) -> None:
    po = tmp_path / "x.po"
    po.write_text('msgid "a"\nmsgstr "あ"\n\nmsgid "a"\nmsgstr "い"\n', "utf-8")
    with pytest.raises(ValueError, match="msgid 'a' appears twice"):
        i18n_catalog.read_po(po)
