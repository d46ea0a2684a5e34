"""Start-up work: the rule-file cache, the remedy index and the typer-free plain command line."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oomdoctor import cache
from oomdoctor.advisor import registry
from oomdoctor.cli import _invoke, diagnose
from oomdoctor.rulepack import loader

ROOT = Path(__file__).resolve().parent.parent
SMALL_LOG = ROOT / "fixtures" / "vllm"


def _models(rf: Any) -> list[Any]:
    out = [rf]
    for r in rf.rule:
        out += [r, *r.match, *r.no_match]
    return out + list(rf.context) + list(rf.phase)


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(d))
    return d


@pytest.mark.parametrize("name", sorted(p.name for p in loader.builtin_rules_dir().glob("*.toml")))
def test_a_cached_rule_file_is_the_validated_one(cache_dir: Path, name: str) -> None:
    path = loader.builtin_rules_dir() / name
    fresh = loader.read_rule_file(path)
    cached = loader._cached(path.read_bytes())
    assert cached is not None
    assert cached == fresh and cached.model_dump() == fresh.model_dump()
    for a, b in zip(_models(cached), _models(fresh), strict=True):
        assert type(a) is type(b) and a.model_fields_set == b.model_fields_set


def test_the_cache_is_keyed_by_the_bytes_and_skips_parsing(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules.toml"
    text = (loader.builtin_rules_dir() / "trtllm.toml").read_text(encoding="utf-8")
    rules.write_text(text, encoding="utf-8")
    parsed: list[str] = []
    real = cache.toml_module().loads
    monkeypatch.setattr(cache.toml_module(), "loads", lambda s: parsed.append(s) or real(s))
    first = loader.read_rule_file(rules)
    assert loader.read_rule_file(rules) == first
    assert len(parsed) == 1
    # an edited file is parsed again, and its edit shows
    rules.write_text(text.replace('title = "', 'title = "Edited: ', 1), encoding="utf-8")
    edited = loader.read_rule_file(rules)
    assert len(parsed) == 2
    assert edited.rule[0].title.startswith("Edited: ") and not first.rule[0].title.startswith("Edited: ")
    # so is an invalid edit: the error names the field, every time
    rules.write_text(text + '\n[[phase]]\nphase = "nap"\n', encoding="utf-8")
    for _ in range(2):
        with pytest.raises(loader.RulePackError, match=r"phase\[\d+\]: phase: 'nap' is not one of"):
            loader.read_rule_file(rules)


def test_a_corrupt_or_foreign_entry_is_never_trusted(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = loader.builtin_rules_dir() / "training.toml"
    raw = path.read_bytes()
    good = loader.read_rule_file(path)
    entry = cache.entry_path("rules", loader._digest(raw))
    blob = entry.read_bytes()
    head, _, payload = blob.partition(b"\n")
    calls: list[str] = []
    real = loader._validate_schema
    monkeypatch.setattr(loader, "_validate_schema", lambda data, where: calls.append(where) or real(data, where))
    # a flipped byte, a truncated entry, and valid JSON of the wrong shape under a correct hash
    import hashlib

    foreign = json.dumps({"v": {"rule": "nope"}, "s": []}).encode()
    for bad in (
        head + b"\n" + payload.replace(b'"id"', b'"ix"', 1),
        blob[: len(blob) // 2],
        hashlib.sha256(foreign).hexdigest().encode() + b"\n" + foreign,
        b"",
    ):
        entry.write_bytes(bad)
        assert loader._cached(raw) is None
        assert loader.read_rule_file(path) == good
    assert len(calls) == 4
    assert entry.read_bytes() == blob  # rewritten whole


def test_a_source_key_follows_every_source_and_refuses_an_unreadable_one(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 2\n")
    key = cache.source_key("t 1", [a, b])
    assert key is not None and key == cache.source_key("t 1", [a, b])
    assert cache.source_key("t 2", [a, b]) != key  # another layout
    b.write_text("y = 3\n")
    assert cache.source_key("t 1", [a, b]) not in (None, key)
    b.unlink()
    assert cache.source_key("t 1", [a, b]) is None


def test_rule_files_are_not_cached_when_their_sources_cannot_be_read(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an install without model.py or schema.json: an edit to them could not be told
    monkeypatch.setattr(loader, "_code_key", lambda: None)
    path = loader.builtin_rules_dir() / "training.toml"
    assert loader.read_rule_file(path) == loader.read_rule_file(path)
    assert loader._digest(path.read_bytes()) is None and loader._cached(path.read_bytes()) is None
    assert not list(cache_dir.glob("rules-*.json"))


def test_an_unwritable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(blocker / "sub"))
    path = loader.builtin_rules_dir() / "training.toml"
    assert loader.read_rule_file(path) == loader.read_rule_file(path)
    assert cache.load("rules", loader._digest(path.read_bytes())) is None


def test_cache_store_refuses_values_json_cannot_carry(cache_dir: Path) -> None:
    import datetime

    assert not cache.store("rules", "k", {"when": datetime.date(2024, 1, 1)})
    assert not cache.store("rules", "k", {"pair": (1, 2)})
    assert cache.load("rules", "k") is None
    assert cache.store("rules", "k", {"pair": [1, 2]})
    assert cache.load("rules", "k") == {"pair": [1, 2]}


@pytest.mark.parametrize(
    "path",
    [
        loader.builtin_rules_dir() / "advice" / "causes.toml",
        loader.builtin_rules_dir() / "advice" / "remedies.toml",
        loader.builtin_rules_dir() / "advice" / "flags.toml",
        ROOT / "oomdoctor" / "data" / "models.toml",
        ROOT / "oomdoctor" / "data" / "gpus.toml",
    ],
    ids=lambda p: p.name,
)
def test_a_cached_toml_table_is_the_parsed_one(cache_dir: Path, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = cache.toml_module().loads(path.read_text("utf-8"))
    assert cache.load_toml(path) == fresh
    monkeypatch.setattr(cache.toml_module(), "loads", lambda s: pytest.fail("parsed again"))
    again = cache.load_toml(path)
    assert again == fresh and json.dumps(again) == json.dumps(fresh)  # same keys, same order


def test_a_toml_table_is_parsed_again_when_its_text_changes_or_json_cannot_carry_it(
    cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "t.toml"
    doc.write_text("a = 1\n", encoding="utf-8")
    assert cache.load_toml(doc) == {"a": 1}
    doc.write_text("a = 2\n", encoding="utf-8")
    assert cache.load_toml(doc) == {"a": 2}
    doc.write_text("when = 2024-01-01\n", encoding="utf-8")
    import datetime

    assert cache.load_toml(doc) == {"when": datetime.date(2024, 1, 1)}
    assert cache.load_toml(doc) == {"when": datetime.date(2024, 1, 1)}
    doc.write_text("a = [\n", encoding="utf-8")
    with pytest.raises(cache.toml_module().TOMLDecodeError):
        cache.load_toml(doc)


def test_the_cache_keeps_a_bounded_number_of_entries(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    for i in range(6):
        assert cache.store("rules", f"k{i}", [i])
    assert len(list(cache_dir.glob("rules-*.json"))) == 3


def _run(code: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True)
    return out.stdout.strip()


def test_the_remedy_index_imports_no_remedy_module(cache_dir: Path) -> None:
    env = {**os.environ, "OOMDOCTOR_CACHE_DIR": str(cache_dir)}
    code = (
        "import sys; from oomdoctor.advisor.registry import remedy_ids; ids = remedy_ids(); "
        "print(len(ids), sorted(m for m in sys.modules if m.startswith('oomdoctor.advisor.remedies_')))"
    )
    cold = _run(code, env)
    warm = _run(code, env)
    n = len(registry.remedy_ids())
    assert cold.startswith(f"{n} ['oomdoctor.advisor.remedies_asks', 'oomdoctor.advisor.remedies_diffusers', "
                           "'oomdoctor.advisor.remedies_generic',")
    assert warm == f"{n} []"
    # a corrupt index is rebuilt by importing everything
    (entry,) = cache_dir.glob("remedies-*.json")
    entry.write_bytes(b"x" + entry.read_bytes())
    assert _run(code, env) == cold


def test_calculator_imports_the_module_that_defines_the_remedy(cache_dir: Path) -> None:
    env = {**os.environ, "OOMDOCTOR_CACHE_DIR": str(cache_dir)}
    code = (
        "import sys; from oomdoctor.advisor.registry import calculator, remedy_ids; remedy_ids(); "
        "f = calculator('xla.preallocate-false'); print(f.__module__, "
        "sorted(m for m in sys.modules if m.startswith('oomdoctor.advisor.remedies_')))"
    )
    _run(code, env)
    assert _run(code, env) == "oomdoctor.advisor.remedies_xla ['oomdoctor.advisor.remedies_xla']"
    with pytest.raises(KeyError):
        registry.calculator("no.such-remedy")


# Command lines: plain_options must give run() exactly what typer gives it, or hand over.
PLAIN = [
    ["a.log"],
    ["-f", "json", "a.log"],
    ["--format", "json", "a.log", "b.log"],
    ["--format=jsonl", "a.log"],
    ["a.log", "-f", "markdown", "-o", "out.md"],
    ["--output=out.json", "-q", "a.log"],
    ["--quiet"],
    [],
    ["--hint", "gpus=2", "--hint", "gpu=A10G", "a.log"],
    ["--hint=gpus=2", "a.log"],
    ["--model-config", "config.json", "--rules", "r1", "--rules=r2", "a.log"],
    ["--fail-on", "warning", "a.log"],
    ["--fail-on", "bogus", "-f", "bogus", "a.log"],
    ["-f", "json", "-f", "text", "a.log"],
    ["-f", "", "a.log"],
]
HANDED_OVER = [
    ["--help"],
    ["-h"],
    ["--version"],
    ["-fjson", "a.log"],
    ["-f=json", "a.log"],
    ["-f"],
    ["-f", "-q", "a.log"],
    ["--", "-a.log"],
    ["-"],
    ["--follow", "a.log"],
    ["-F", "a.log"],
    ["--bogus", "a.log"],
    ["--hint", "nokey", "a.log"],
    ["--hint", " =x", "a.log"],
    ["--quiet=1"],
    ["-qf", "json"],
]


RUN_PARAMS = inspect.signature(diagnose.run).parameters


def _typer_parse(args: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    got: dict[str, Any] = {}
    sig = inspect.Signature(list(RUN_PARAMS.values()))

    def record(*a: Any, **kw: Any) -> int:
        bound = sig.bind(*a, **kw)
        bound.apply_defaults()
        got.update(bound.arguments)
        return 0

    monkeypatch.setattr(diagnose, "run", record)
    assert _invoke(diagnose.app, args) == 0
    return got


def _normal(opts: dict[str, Any]) -> dict[str, Any]:
    full = {k: p.default for k, p in RUN_PARAMS.items()}
    full.update(opts)
    # typer passes [] or None for an empty list option; run() treats them alike
    return {k: (v or None) if isinstance(v, list) or v is None else v for k, v in full.items()}


@pytest.mark.parametrize("args", PLAIN, ids=" ".join)
def test_plain_command_lines_parse_as_typer_parses_them(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plain = diagnose.plain_options(args)
    assert plain is not None
    assert _normal(plain) == _normal(_typer_parse(args, monkeypatch))


@pytest.mark.parametrize("args", HANDED_OVER, ids=" ".join)
def test_everything_else_goes_to_typer(args: list[str]) -> None:
    assert diagnose.plain_options(args) is None


def test_shell_completion_goes_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_OOMDOCTOR_COMPLETE", "bash_complete")
    assert diagnose.plain_options(["a.log"]) is None


def test_a_plain_run_imports_neither_typer_nor_jsonschema(cache_dir: Path) -> None:
    log = next(p for p in sorted(SMALL_LOG.glob("*.log")))
    env = {**os.environ, "OOMDOCTOR_CACHE_DIR": str(cache_dir)}
    code = (
        "import sys, io; from oomdoctor.cli import main; out = sys.stdout; sys.stdout = io.StringIO(); "
        f"code = main(['-f', 'json', {str(log)!r}]); sys.stdout = out; "
        "print(code, sorted(m for m in ('typer', 'click', 'jsonschema', 'rich') if m in sys.modules))"
    )
    _run(code, env)  # fills the cache
    code_, mods = _run(code, env).split(" ", 1)
    assert code_ in ("0", "1") and mods == "[]"


# The literal-prefix shortcut of LazyPattern: never a missed match.
@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("Loading weights took", "Loading weights took"),
        ("abc|def", ""),
        ("ab(c|d)", "ab"),
        ("abc*", "ab"),
        ("abc?", "ab"),
        ("ab{2}", "a"),
        ("ab+c", "ab"),
        ("a\\.b", "a"),
        ("ab(?P<x>c)", "ab"),
        ("a[|]b", "a"),
        ("a[|]b|c", ""),
        ("a[]|]|b", ""),
        ("a(?:b|c)|d", ""),
        ("[x]abc", ""),
        ("(?i)abc", ""),
        ("ab(?i)c", ""),
        ("x(?x) a", ""),
    ],
)
def test_required_prefix(pattern: str, prefix: str) -> None:
    assert loader.required_prefix(pattern) == prefix


def _pack_patterns_and_texts() -> tuple[list[str], list[str]]:
    """Every pattern of the built-in pack (rules, extractions, contexts, phases), and the logs of
    its examples."""
    pack = loader.default_pack()
    patterns = [r.rule.pattern for r in pack.rules] + [c.rule.pattern for c in pack.contexts]
    patterns += [v for r in pack.rules for v in (*r.rule.extract.values(), *r.rule.extract_all.values())]
    patterns += [m for p in pack.phases for m in (*p.rule.markers, *p.rule.progress)]
    texts = [ex.log for r in pack.rules for ex in (*r.rule.match, *r.rule.no_match)]
    texts += [str(ex.get("log", "")) for c in pack.contexts for ex in c.rule.match]
    return patterns, texts


def test_the_prefix_shortcut_agrees_with_the_regex_on_every_example() -> None:
    import regex

    patterns, texts = _pack_patterns_and_texts()
    with_prefix = [(p, loader.required_prefix(p)) for p in patterns]
    assert sum(1 for _, pre in with_prefix if pre) > len(patterns) // 4
    for pattern, prefix in with_prefix:
        if not prefix:
            continue
        compiled = regex.compile(pattern, regex.VERSION0)
        lazy = loader.LazyPattern(pattern)
        for text in texts:
            found = compiled.search(text)
            assert found is None or prefix in text, (pattern, text)
            if found is not None:
                assert found.group(0).startswith(prefix)
        assert lazy.search("\x00") is None and lazy._compiled is None


def test_a_plain_run_never_imports_importlib_metadata(cache_dir: Path) -> None:
    # pydantic's plugin lookup is the only importer on this path (about 20 ms of a small log's run)
    log = next(p for p in sorted(SMALL_LOG.glob("*.log")))
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["OOMDOCTOR_CACHE_DIR"] = str(cache_dir)
    code = (
        "import sys, io; from oomdoctor.cli import main; out = sys.stdout; sys.stdout = io.StringIO(); "
        f"main([{str(log)!r}]); sys.stdout = out; "
        "from pydantic.plugin._loader import get_plugins; "
        "print('importlib.metadata' in sys.modules, list(get_plugins()))"
    )
    _run(code, env)  # fills the cache
    assert _run(code, env) == "False []"


def test_the_plugin_stand_in_finds_no_plugin_and_hands_anything_else_to_pydantic() -> None:
    code = (
        "import sys; from oomdoctor.cli.pydantic_plugins import skip_plugin_lookup as s; "
        "first = s(); again = s(); "
        "import pydantic; M = pydantic.create_model('M', x=(int, ...)); m = M(x='3'); "
        "from pydantic.plugin import _loader; "
        "print(first, again, m.x, list(_loader.get_plugins()), 'importlib.metadata' in sys.modules, "
        "_loader.PYDANTIC_ENTRY_POINT_GROUP, 'importlib.metadata' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    assert _run(code, env) == "True False 3 [] False pydantic True"
    # pydantic's own switch set: pydantic is left to apply it
    assert _run(code, {**env, "PYDANTIC_DISABLE_PLUGINS": "__all__"}).startswith("False False 3 [] True")


def test_the_server_keeps_pydantic_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    from oomdoctor import cli
    from oomdoctor.cli import pydantic_plugins

    asked: list[list[str]] = []
    monkeypatch.setattr(pydantic_plugins, "skip_plugin_lookup", lambda: asked.append([]) or True)
    monkeypatch.setattr(cli, "_invoke", lambda app, args: asked[-1].extend(args) if asked else 0)
    cli.main(["serve", "--help"])
    cli.main(["--lang", "en", "serve", "--help"])
    assert asked == []
    cli.main(["rules", "list"])
    assert asked == [["rules", "list"]]


# Compiled regexes kept on disk (oomdoctor.regex_cache)
def test_a_pattern_compiled_in_one_run_is_rebuilt_in_the_next_without_parsing(cache_dir: Path) -> None:
    env = {**os.environ, "OOMDOCTOR_CACHE_DIR": str(cache_dir)}
    code = (
        "import regex._main as m; calls = []; real = m._compile; "
        "m._compile = lambda p, *a, **k: calls.append(p) or real(p, *a, **k); "
        "from oomdoctor import regex_cache; "
        "p = regex_cache.compile(r'(?P<n>\\d+) GiB free', regex_cache.regex.VERSION0); "
        "print(len(calls), p.search('has 3 GiB free').group('n'), sorted(p.groupindex))"
    )
    assert _run(code, env) == "1 3 ['n']"  # compiled, and stored at exit
    assert _run(code, env) == "0 3 ['n']"  # rebuilt from its compiled form


def test_every_pattern_of_the_pack_is_rebuilt_as_compiled() -> None:
    import pickle

    import regex

    from oomdoctor import regex_cache

    patterns, texts = _pack_patterns_and_texts()
    import base64

    for source in dict.fromkeys(patterns):
        fresh = regex.compile(source, regex.VERSION0)
        form = base64.b64encode(pickle.dumps(fresh, protocol=4)).decode("ascii")
        back = regex_cache._rebuild(form, source)
        assert back is not None and back is not fresh
        assert (back.pattern, back.flags, back.groupindex, back.groups) == (
            fresh.pattern, fresh.flags, fresh.groupindex, fresh.groups
        )
        for text in texts:
            a, b = fresh.search(text), back.search(text)
            assert (a and (a.span(), a.groupdict())) == (b and (b.span(), b.groupdict())), (source, text)


def test_a_foreign_or_damaged_form_is_never_used(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64
    import pickle

    from oomdoctor import regex_cache

    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, ("echo pwned > " + str(cache_dir / "pwned"),))

    other = regex_cache.regex.compile("other")
    forms = {
        "evil": base64.b64encode(pickle.dumps(Boom())).decode(),
        "other": base64.b64encode(pickle.dumps(other)).decode(),
        "junk": "not base64 at all!",
        "cut": base64.b64encode(pickle.dumps(other)[:-5]).decode(),
    }
    for name, form in forms.items():
        monkeypatch.setattr(regex_cache, "_forms", {f"0\0{int(regex_cache.regex.DEFAULT_VERSION)}\0mine {name}": form})
        got = regex_cache.compile(f"mine {name}")
        assert got.pattern == f"mine {name}" and got.search(f"is mine {name}")
    assert not (cache_dir / "pwned").exists()
    # a pattern compiled for the locale in force is not kept
    monkeypatch.setattr(regex_cache, "_new", {})
    regex_cache.compile(r"(?L)\w+")
    assert regex_cache._new == {}
