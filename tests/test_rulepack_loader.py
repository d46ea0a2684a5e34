"""The rule loader at its boundaries (issue 38, the mutation run of ``rulepack/loader``): the
limits a user's rules get, probes, literal prefixes, the packs remembered for the advisor and
the pack's warnings."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

import pytest

from oomdoctor.rulepack import loader
from oomdoctor.rulepack.loader import (
    RulePack,
    RulePackError,
    _alternation_at_top,
    _probes,
    check_pattern,
    load_pack,
    loaded_packs,
    reads_a_fact,
    required_prefix,
)


def _rule(rid: str, word: str = "zzqq", extra: str = "") -> str:
    return (f'[[rule]]\nid = "{rid}"\ntitle = "A test rule"\nengine = "test"\nkind = "test"\n'
            f"triggers = [\"{word}\"]\npattern = '{word} (?P<count>\\\\d+)'\n{extra}"
            f'[[rule.match]]\nlog = "{word} 7"\nfigures = {{ count = 7 }}\n')


def test_the_limits_a_users_rules_get() -> None:
    assert loader.MAX_USER_RULES == 2000  # the README: "at most 2 000 rules"
    assert loader.REGEX_TIMEOUT == 0.25  # one search of a log's window
    assert (loader.PROBE_TIMEOUT, loader.PROBE_LENGTH) == (0.1, 256)  # each crafted probe at load


def test_the_probes_of_a_pattern() -> None:
    """Runs of each character the pattern names and of " -.0:a", behind nothing, the first trigger
    and the first trigger and a blank; then "a " and "a0" runs; each ends in a NUL."""
    probes = _probes("ab", ["zzqq", "second", "third"])
    chars = [" ", "-", ".", "0", ":", "a", "b"]
    heads = ["", "zzqq", "zzqq ", "second", "second "]
    expected = [h + c * 256 + "\x00" for h in heads for c in chars]
    assert [p for p in probes if "a a" not in p and "a0a0" not in p] == expected
    assert len(probes) == len(heads) * (len(chars) + 2)
    assert probes[len(chars)] == "a " * 128 + "\x00" and probes[len(chars) + 1] == "a0" * 128 + "\x00"
    # at most 24 characters, the first in sorted order
    many = _probes("".join(chr(c) for c in range(ord("A"), ord("Z") + 1)), [])
    assert [p[0] for p in many[:-2]] == sorted({*"ABCDEFGHIJKLMNOPQRSTUVWXYZ", *"a0 .-:"})[:24]


def test_each_probe_gets_the_probe_time_limit() -> None:
    class Pattern:
        pattern = "a"

        def __init__(self) -> None:
            self.timeouts: list[float] = []

        def search(self, probe: str, timeout: float) -> None:
            self.timeouts.append(timeout)

    p = Pattern()
    check_pattern(p, [], "who", "pattern")
    assert p.timeouts and set(p.timeouts) == {0.1}


@pytest.mark.parametrize(
    ("pattern", "top"),
    [
        ("a|b", True),
        ("|a", True),  # the first character counts
        ("(a|b)c", False),
        ("[|]a", False),
        ("\\|a", False),
        ("(a)|b", True),
        ("((a)|b)", False),  # a group closed inside another: still one level down
        ("a[", False),  # a set left open at the end (no character after "[" or "[^" to look at)
        ("a[^", False),
        ("[]|]a", False),  # "]" first in a set is literal: the set ends at the second one
        ("[]]|a", True),
        ("[^]|]a", False),
        ("[a|]b", False),
    ],
)
def test_alternation_at_top(pattern: str, top: bool) -> None:
    assert _alternation_at_top(pattern) is top


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [("CUDA out of memory", "CUDA out of memory"), ("abc|d", ""), ("abc(d|e)", "abc"), ("abc?", "ab")],
)
def test_required_prefix(pattern: str, prefix: str) -> None:
    assert required_prefix(pattern) == prefix


@pytest.mark.parametrize(("pattern", "reads"), [("(?P<x>a)", True), ("(?<x>a)", True), ("a(b)c", False), ("abc", False)])
def test_a_context_pattern_reads_a_fact_only_with_a_named_group(pattern: str, reads: bool) -> None:
    assert reads_a_fact(pattern) is reads


def test_unknown_remedies_are_an_error_unless_not_checked(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(_rule("test.one", extra='remedies = ["no-such-remedy"]\n'), encoding="utf-8")
    with pytest.raises(RulePackError, match=r"remedies: unknown remedy id 'no-such-remedy'"):
        load_pack([tmp_path], include_builtin=False)
    pack = load_pack([tmp_path], include_builtin=False, check_remedies=False)
    assert [r.rule.remedies for r in pack.rules] == [["no-such-remedy"]]


def test_only_packs_with_rule_directories_are_remembered(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(_rule("test.one"), encoding="utf-8")
    builtin_only = load_pack()
    assert all(p is not builtin_only for p in loaded_packs())
    users_only = load_pack([tmp_path], include_builtin=False)
    assert loaded_packs()[0] is users_only  # newest first
    both = load_pack([tmp_path])
    newest = loaded_packs()
    assert newest[0] is both and newest[1] is users_only
    assert [r.order for r in users_only.rules] == [0]


def test_a_packs_warning_goes_to_its_warn_else_to_python_warnings() -> None:
    said: list[str] = []
    pack = RulePack(warn=said.append)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pack.say("rule dropped")
    assert said == ["rule dropped"]
    with pytest.warns(RuntimeWarning, match="^rule dropped$") as caught:
        RulePack().say("rule dropped")
    assert caught[0].filename == __file__  # told where say() was called from


def test_a_rule_is_found_by_its_id(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(_rule("test.one") + _rule("test.two", "qqzz"), encoding="utf-8")
    pack = load_pack([tmp_path], include_builtin=False)
    assert pack.rule("test.two").rule.triggers == ["qqzz"] and pack.rule("test.one").rule.triggers == ["zzqq"]
    with pytest.raises(KeyError):
        pack.rule("test.three")


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        # an error in a rule's own table (a path of two: "rule", its index) names the rule
        (_rule("test.one") + '[[rule]]\nid = "test.two"\n', "rule \"test.two\": (file): 'title' is a required property"),
        (_rule("test.one") + _rule("test.two", "qqzz", "window = 99\n"),
         'rule "test.two": window: 99 is greater than the maximum of 40'),
        ('[[context]]\nid = "test.ctx"\n', "context \"test.ctx\": (file): 'triggers' is a required property"),
        ("[[phase]]\n", "phase[0]: (file): 'phase' is a required property"),
        ('[[phase]]\nphase = "inference"\nframes = [3]\n', "phase[0]: frames[0]: 3 is not of type 'string'"),
    ],
)
def test_schema_errors_name_the_rule(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "a.toml").write_text(toml, encoding="utf-8")
    with pytest.raises(RulePackError) as exc:
        load_pack([tmp_path], include_builtin=False)
    assert str(exc.value).endswith(f"a.toml: {message}")


def test_a_toml_syntax_error_names_its_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('[[rule]]\nid = = 1\n', encoding="utf-8")
    with pytest.raises(RulePackError) as exc:
        load_pack([tmp_path], include_builtin=False)
    assert str(exc.value).endswith("a.toml:2:6: TOML syntax error: Invalid value")


def test_a_pack_no_longer_used_is_forgotten(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(_rule("test.one"), encoding="utf-8")
    kept = load_pack([tmp_path], include_builtin=False)
    dropped = load_pack([tmp_path], include_builtin=False)
    ident = id(dropped)
    del dropped
    gc.collect()
    newest = loaded_packs()
    assert newest[0] is kept and all(p is not None and id(p) != ident for p in newest)


def test_a_user_regex_that_does_not_compile_names_the_position(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(_rule("test.one").replace("pattern = 'zzqq (?P<count>\\\\d+)'", "pattern = 'zzqq ('"),
                                     encoding="utf-8")
    with pytest.raises(RulePackError) as exc:
        load_pack([tmp_path], include_builtin=False)
    assert str(exc.value).endswith(
        'a.toml: rule "test.one": pattern: regex does not compile at position 6: missing )')


def test_phase_frames_named_with_their_file_are_kept_apart(tmp_path: Path) -> None:
    """A phase's frame ``PIECE::NAME`` names a function in a file (its path piece with '/'), a
    bare frame any function of that name: each goes to its own field, never to both."""
    (tmp_path / "phases.toml").write_text(
        '[[phase]]\nphase = "inference"\n'
        'frames = ["my_step", "pkg/mod.py::other_step", \'a\\b.py::win_step\']\n',
        encoding="utf-8",
    )
    pack = load_pack([tmp_path], include_builtin=False)
    (ph,) = [p for p in pack.phases if p.rule.phase == "inference"]
    assert ph.frames == frozenset({"my_step"})
    assert ph.file_frames == (("pkg/mod.py", "other_step"), ("a/b.py", "win_step"))


def test_phases_are_asked_specific_first_whatever_the_file_order(tmp_path: Path) -> None:
    """The phase tables are sorted by PHASE_PRIORITY (a capture before the inference it happens
    in), not by where a file lists them."""
    (tmp_path / "phases.toml").write_text(
        '[[phase]]\nphase = "inference"\nframes = ["generate"]\n'
        '[[phase]]\nphase = "weights-load"\nframes = ["load_weights"]\n'
        '[[phase]]\nphase = "cudagraph-capture"\nframes = ["capture_graph"]\n',
        encoding="utf-8",
    )
    pack = load_pack([tmp_path], include_builtin=False)
    assert [p.rule.phase for p in pack.phases] == ["cudagraph-capture", "weights-load", "inference"]
