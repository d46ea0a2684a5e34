"""The prefilter paths agree, scanning is chunk-independent, and memory stays bounded."""

from __future__ import annotations

import bisect
import json
import random
from functools import cache
from pathlib import Path

import pytest

from oomdoctor.prefilter import Prefilter, PurePrefilter, make_prefilter, needles
from oomdoctor.prefilter.interface import Haystacks, json_forms
from oomdoctor.reader import MAX_LINE_BYTES, LineSplitter
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import _BUILTIN_TRIGGERS, Scanner
from tests.corpus import FIXTURES

LOGS = sorted(FIXTURES.glob("**/*.log"))


def _spans(pf: Prefilter, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
    """The line spans of ``pf``'s candidates (masks aside)."""
    return [(start, end) for start, end, _ in pf.candidates(block, lo, hi)]


def _triggers() -> list[str]:
    return [*default_pack().all_triggers(), *_BUILTIN_TRIGGERS]


def _pure(planned: bool = True) -> PurePrefilter:
    """The pure prefilter searching by gates (``planned``) or needle by needle (small inputs)."""
    pf = PurePrefilter(_triggers())
    if planned:
        pf._PLAN_AFTER = 0
    else:
        pf._PLAN_AFTER = 1 << 62
    return pf


def _hyperscan():
    pytest.importorskip("hyperscan")
    from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter

    return HyperscanPrefilter(_triggers())


def _report(data: bytes, source: str, prefilter, chunks: list[int] | None = None) -> dict:
    scanner = Scanner(default_pack(), source=source, prefilter=prefilter)
    if chunks is None:
        scanner.feed(data)
    else:
        pos = 0
        for size in chunks:
            scanner.feed(data[pos : pos + size])
            pos += size
        scanner.feed(data[pos:])
    return json.loads(scanner.close().model_dump_json())


@cache
def _forms(lit: bytes) -> tuple[bytes, ...]:
    return tuple(form for form, _ in json_forms([lit]))


def _holds(low: bytes, lit: bytes) -> bool:
    """Whether ``low`` holds ``lit`` as it is or in one of its JSON forms (what a prefilter finds)."""
    return lit in low or any(form in low for form in _forms(lit))


def _spans_by_hand(block: bytes, trigs: list[str]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for line in block.split(b"\n"):
        low = line.lower()
        if any(_holds(low, t.lower().encode()) for t in trigs if t):
            out.append((pos, pos + len(line)))
        pos += len(line) + 1
    return out


def _candidates_by_hand(
    block: bytes, lits: list[bytes], lo: int = 0, hi: int | None = None
) -> list[tuple[int, int, int]]:
    """Every line of ``block[lo:hi]`` holding a needle (ASCII case folded), with its mask.

    Each needle, then each of its JSON forms (on a line with a backslash: every form holds one),
    is looked for with ``bytes.find`` over the whole text, and each place found is given to its
    line: no sieve, no regex, and quick enough for megabytes."""
    text = block[lo:hi].lower()  # bytes.lower() folds ASCII only, like the lines' own lower()
    starts = [0]
    nl = text.find(b"\n")
    while nl != -1:
        starts.append(nl + 1)
        nl = text.find(b"\n", nl + 1)
    ends = [*(s - 1 for s in starts[1:]), len(text)]
    masks = [0] * len(starts)

    def mark(word: bytes, bit: int, needs_backslash: bool) -> None:
        at = text.find(word)
        while at != -1:
            k = bisect.bisect_right(starts, at) - 1
            if at + len(word) > ends[k]:  # across a line end: not in one line
                at = text.find(word, at + 1)
                continue
            if not needs_backslash or b"\\" in text[starts[k] : ends[k]]:
                masks[k] |= bit
            at = text.find(word, ends[k] + 1)  # on to the next line

    for i, lit in enumerate(lits):
        mark(lit, 1 << i, False)
        for form in _forms(lit):
            mark(form, 1 << i, True)
    return [(lo + starts[k], lo + ends[k], m) for k, m in enumerate(masks) if m]


def _candidates_line_by_line(
    block: bytes, lits: list[bytes], lo: int = 0, hi: int | None = None
) -> list[tuple[int, int, int]]:
    """What :func:`_candidates_by_hand` finds, the slow obvious way (tests that one)."""
    out, pos = [], lo
    escaped = [(1 << i, _forms(lit)) for i, lit in enumerate(lits) if _forms(lit)]
    for line in block[lo:hi].split(b"\n"):
        low = line.lower()
        mask = sum(1 << i for i, lit in enumerate(lits) if lit in low)
        if b"\\" in low:  # (every JSON form holds a backslash)
            mask |= sum(bit for bit, forms in escaped if any(form in low for form in forms))
        if mask:
            out.append((pos, pos + len(line), mask))
        pos += len(line) + 1
    return out


def test_the_oracle_finds_what_a_line_by_line_search_finds() -> None:
    lits = [*needles([*default_pack().all_triggers(), *_BUILTIN_TRIGGERS]), b"", b"a\nb", b"x"]
    rng = random.Random(5)
    pieces = [b"\n", b"x", b"CUDA out of memory", b'{"log": "Traceback (most recent call last)\\n"}', b"\\",
              b"A", b"b", b"KV cache", b"\xff", b" ", b"out of mem", b'  File \\"x.py\\", line 1, in f', b'\\tmemory: 3']
    for _ in range(200):
        block = b"".join(rng.choice(pieces) for _ in range(rng.randrange(40)))
        lo = rng.randrange(len(block) + 1)
        hi = rng.choice([None, rng.randrange(lo, len(block) + 1)])
        assert _candidates_by_hand(block, lits, lo, hi) == _candidates_line_by_line(block, lits, lo, hi)
    block = TRICKY + b"\n" + (FIXTURES / "vllm" / "vllm-054.log").read_bytes()
    assert _candidates_by_hand(block, lits) == _candidates_line_by_line(block, lits)
    assert any(_forms(lit) for lit in lits)  # the JSON forms were looked for too


TRICKY = (
    b"nothing here\n"
    b"CUDA OUT OF MEMORY at the start\n"
    b"two on one line: cuda out of memory ... Traceback (most recent call last)\n"
    b'  FILE "x.py", line 1, in f\n'
    b"\n"
    b"cUdA oUt Of MeMoRy\n"
    b"cuda out of memor\n"  # near miss
    b"ends without newline: Avg Prompt Throughput"
)


def test_needles_drop_blanks_duplicates_and_containing_literals() -> None:
    assert needles(["Capturing", "graph capturing finished", "", "CAPTURING", "load_model"]) == [
        b"capturing",
        b"load_model",
    ]
    # shortest first, then by bytes: the same order in every process (hash seeds differ)
    assert needles(["zeta", "beta", "alpha", "xy"]) == [b"xy", b"beta", b"zeta", b"alpha"]


def test_needles_keep_exactly_the_literals_that_hold_no_shorter_kept_one() -> None:
    """The definition, tested one by one, on random literals over a small alphabet (the NUL
    that separates them in the searched text among its letters)."""
    rng = random.Random(5)
    for _ in range(2000):
        triggers = ["".join(rng.choice("aB\0\n") for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(0, 12))]
        lits = sorted({t.lower().encode() for t in triggers if t}, key=lambda lit: (len(lit), lit))
        kept: list[bytes] = []
        for lit in lits:
            if not any(k in lit for k in kept):
                kept.append(lit)
        assert needles(triggers) == kept, triggers


def test_haystacks_answer_what_a_test_of_every_text_answers() -> None:
    rng = random.Random(5)
    alphabet = b"ab\0c"
    for _ in range(300):
        texts = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 7))) for _ in range(rng.randrange(0, 8))]
        hay = Haystacks(texts)
        for lit in {bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 4))) for _ in range(10)}:
            assert hay.holding(lit) == [j for j, t in enumerate(texts) if lit in t], (texts, lit)


def test_the_triggers_of_a_mask_are_those_holding_one_of_its_needles() -> None:
    scanner = Scanner(default_pack())
    rng = random.Random(9)
    bits = len(scanner._needles)
    masks = [1 << i for i in range(bits)] + [sum(1 << rng.randrange(bits) for _ in range(rng.randrange(2, 6))) for _ in range(200)]
    for mask in masks:
        lits = [lit for i, lit in enumerate(scanner._needles) if mask >> i & 1]
        want = [t for t in scanner._all_triggers if any(lit in t.encode("utf-8") for lit in lits)]
        assert scanner._triggers_for(mask) == want


@pytest.mark.parametrize("planned", [True, False])
def test_pure_prefilter_finds_every_case_variant_and_only_whole_lines(planned: bool) -> None:
    trigs = _triggers()
    pf = _pure(planned)
    spans = _spans(pf, TRICKY)
    assert spans == _spans_by_hand(TRICKY, trigs)
    assert [TRICKY[a:b] for a, b in spans] == [
        b"CUDA OUT OF MEMORY at the start",
        b"two on one line: cuda out of memory ... Traceback (most recent call last)",
        b'  FILE "x.py", line 1, in f',
        b"cUdA oUt Of MeMoRy",
        b"ends without newline: Avg Prompt Throughput",
    ]


@pytest.mark.parametrize("planned", [True, False])
def test_candidate_masks_name_every_needle_on_the_line(planned: bool) -> None:
    pf = _pure(planned)
    got = pf.candidates(TRICKY)
    assert got == _candidates_by_hand(TRICKY, pf.needles)
    named = {TRICKY[a:b]: [pf.needles[i] for i in range(len(pf.needles)) if m >> i & 1] for a, b, m in got}
    # "out of memory" is a needle of its own (the fallback's vocabulary): it holds "cuda out of memory"
    assert named[b"two on one line: cuda out of memory ... Traceback (most recent call last)"] == [
        b"out of memory",
        b"traceback (most recent call last)",
    ]
    assert named[b'  FILE "x.py", line 1, in f'] == [b'file "', b'", line ']


@pytest.mark.parametrize("planned", [True, False])
def test_hyperscan_prefilter_gives_the_same_spans_and_masks(planned: bool) -> None:
    hs = _hyperscan()
    pure = _pure(planned)
    assert hs.needles == pure.needles
    assert hs.candidates(TRICKY) == pure.candidates(TRICKY)
    for log in LOGS:
        data = log.read_bytes()
        assert hs.candidates(data) == pure.candidates(data), log.name


@pytest.mark.parametrize("planned", [True, False])
def test_random_blocks_agree_with_a_line_by_line_search(planned: bool) -> None:
    trigs = _triggers()
    pure = _pure(planned)
    try:
        hs = _hyperscan()
    except pytest.skip.Exception:
        hs = None
    rng = random.Random(5)
    words = [b"x", b"cuda", b"out of", b"memory", b"CUDA out of memory", b"\n", b"file \"", b"File", b'"',
             b"Traceback (most recent call last)", b"\n\n", b"avg prompt", b" throughput", b"\\", b"\\t", b"\t",
             b"memory:", b"\\vllm\\", b"loss", b'":']
    for _ in range(200):
        block = b" ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))
        want = _spans_by_hand(block, trigs)
        assert _spans(pure, block) == want, block
        assert pure.candidates(block) == _candidates_by_hand(block, pure.needles), block
        if hs is not None:
            assert _spans(hs, block) == want, block
            assert hs.candidates(block) == pure.candidates(block), block
        # a window of a bigger buffer (what the scanner passes to avoid copies)
        lo = block.find(b"\n") + 1
        hi = block.rfind(b"\n") + 1
        if 0 < lo < hi:
            inner = [(a + lo, b + lo) for a, b in _spans_by_hand(block[lo : hi - 1], trigs)]
            assert _spans(pure, block, lo, hi) == inner, block
            if hs is not None:
                assert _spans(hs, block, lo, hi) == inner, block


def test_hyperscan_mask_names_every_needle_the_text_holds() -> None:
    """``mask`` (what the scanner asks of a line normalising changed) is the needles held, by hand."""
    hs = _hyperscan()
    rng = random.Random(7)
    words = [b"x", b"cuda", b"out of", b"memory", b"CUDA Out Of Memory", b"\n", b'file "', b'File \\"', b"Traceback",
             b"(most recent call last)", b"avg prompt", b" throughput", "\u00fcber".encode(), b"{}"]
    texts = [b"", b"torch.OutOfMemoryError: CUDA out of memory.", *(log.read_bytes()[:4000] for log in LOGS[:20])]
    texts += [b" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(200)]
    for text in texts:
        low = text.lower()
        assert hs.mask(text) == sum(1 << i for i, n in enumerate(hs.needles) if _holds(low, n)), text


def test_whole_fixture_suite_reports_are_identical_with_each_prefilter() -> None:
    """Every fixture's JSON report with hyperscan equals the one with the pure-Python path."""
    hs = _hyperscan()
    pure = _pure()  # by gates (the needle-by-needle path: see the spans and masks test above)
    for log in LOGS:
        data = log.read_bytes()
        source = f"{log.parent.name}/{log.name}"
        assert _report(data, source, hs) == _report(data, source, pure), source


def _serving_log() -> bytes:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import genlog

    rng = random.Random(3)
    traffic, _ = genlog.traffic(rng, 0, 60_000)
    head = "\n".join(genlog.startup(rng, 0, 100)) + "\n"
    oom = "\n".join(genlog.oom_block(rng, 50, 200, 1)) + "\n"
    return head.encode() + traffic + oom.encode() + traffic + oom.encode().replace(b"2.37", b"4.75")


def test_serving_log_is_diagnosed_the_same_however_it_is_chunked() -> None:
    data = _serving_log()
    pf = make_prefilter(_triggers())
    whole = _report(data, "x", pf)
    assert [f["rule"] for f in whole["findings"]] == ["torch.cuda-oom", "torch.cuda-oom"]
    assert whole["findings"][0]["figures"]["requested_bytes"] == round(2.37 * 2**30)
    assert whole["findings"][1]["figures"]["requested_bytes"] == round(4.75 * 2**30)
    rng = random.Random(9)
    for _ in range(4):
        chunks = [rng.choice((1, 7, 100, 4096, 65536, 300_000)) for _ in range(60)]
        assert _report(data, "x", pf, chunks) == whole
    for prefilter in ("python", "hyperscan"):
        try:
            other = make_prefilter(_triggers(), prefilter)
        except ImportError:
            continue
        assert _report(data, "x", other, [4096] * 40) == whole


def test_finding_lines_are_numbered_exactly_across_blocks() -> None:
    data = _serving_log()
    want = [i + 1 for i, line in enumerate(data.split(b"\n")) if b"torch.OutOfMemoryError" in line]
    for chunks in (None, [1000] * 200, [333_333]):
        got = [f["location"]["line"] for f in _report(data, "x", make_prefilter(_triggers()), chunks)["findings"]]
        assert got == want


def test_line_splitter_counts_lines_itself_or_lets_the_caller_count() -> None:
    data = b"a\nbb\n\nccc" + b"d" * 10 + b"\ne\n" + b"tail"
    counted, uncounted = LineSplitter(), LineSplitter()
    for i in range(0, len(data), 3):
        part = data[i : i + 3]
        f1, b1 = counted.feed_block(part)
        f2, b2 = uncounted.feed_block(part, count=False)
        assert (f1, b1) == (f2, b2)
        uncounted.advance(b2.count(b"\n"))
    assert counted.close() == uncounted.close() == (6, b"tail\n")


def test_a_long_line_without_newline_costs_bounded_memory() -> None:
    splitter = LineSplitter()
    chunk = b"x" * (1 << 20)
    for _ in range(20):  # 20 MiB, no newline
        first, block = splitter.feed_block(chunk, count=False)
        assert (first, block) == (1, b"")
        assert len(splitter._partial) <= MAX_LINE_BYTES
    first, block = splitter.feed_block(b"yy\nCUDA out of memory\n", count=False)
    assert first == 1
    assert block == b"x" * MAX_LINE_BYTES + b"\nCUDA out of memory\n"


def test_make_prefilter_is_cached_and_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    trigs = _triggers()
    assert make_prefilter(trigs, "python") is make_prefilter(list(trigs), "python")
    monkeypatch.setenv("OOMDOCTOR_PREFILTER", "python")
    assert isinstance(make_prefilter(trigs), PurePrefilter)
    with pytest.raises(ValueError, match="unknown prefilter"):
        make_prefilter(trigs, "grep")


def test_rule_files_validated_before_skip_the_schema_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oomdoctor.rulepack import loader

    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(tmp_path))
    calls: list[str] = []
    real = loader._validate_schema

    def spy(data, where):
        calls.append(where)
        return real(data, where)

    monkeypatch.setattr(loader, "_validate_schema", spy)
    path = loader.builtin_rules_dir() / "vllm.toml"
    first = loader.read_rule_file(path)
    second = loader.read_rule_file(path)
    assert len(calls) == 1
    assert first == second
    assert [p.name for p in tmp_path.iterdir()] == [f"rules-{loader._digest(path.read_bytes())}.json"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nid = "x"\n')
    with pytest.raises(loader.RulePackError):
        loader.read_rule_file(bad)
    with pytest.raises(loader.RulePackError):
        loader.read_rule_file(bad)
    assert len(calls) == 3


WRAPPED = (
    b'  File "/site-packages/torch/nn/modules/module.py", line 1, in forward\n'
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 232.00 MiB.\n"
    b"GPU 0 has a total capacity of 23.57 GiB of which 154.25 MiB is free.\n"
    b"Of the allocated memory 22.88 GiB is allocated by PyTorch, and 188.29 MiB is reserved by PyTorch but unallocated.\n"
)


@pytest.mark.parametrize("prefilter", ["python", "hyperscan"])
def test_a_message_wrapped_over_lines_is_read_whole_even_when_a_block_ends_on_its_first_line(
    prefilter: str,
) -> None:
    """The look-ahead after a rule's trigger line reaches into the next block."""
    try:
        pf = make_prefilter(_triggers(), prefilter)
    except ImportError:
        pytest.skip("hyperscan not installed")
    data = b"step 1\n" * 5 + WRAPPED + b"step 2\n" * 30
    cut = data.index(b"GPU 0 has")
    for chunks in (None, [cut], [cut, 1], [cut, 60, 60]):
        findings = _report(data, "x", pf, chunks)["findings"]
        assert len(findings) == 1
        figures = findings[0]["figures"]
        assert figures["requested_bytes"] == 232 * 2**20
        assert figures["total_bytes"] == round(23.57 * 2**30)
        assert figures["free_bytes"] == round(154.25 * 2**20)
        assert figures["allocated_bytes"] == round(22.88 * 2**30)
        assert findings[0]["location"]["line"] == 7


def test_progress_bar_only_on_a_terminal_and_only_for_big_inputs(tmp_path: Path) -> None:
    import io

    from oomdoctor.cli.progress import MIN_BYTES, FileProgress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    small = tmp_path / "small.log"
    small.write_bytes(b"x\n")
    big = tmp_path / "big.log"
    with open(big, "wb") as f:
        f.truncate(MIN_BYTES)
    assert not FileProgress([str(big)], io.StringIO()).active  # not a TTY
    assert not FileProgress([str(small)], Tty()).active  # too small to need one
    assert not FileProgress(["-"], Tty()).active  # size unknown
    out = Tty()
    with FileProgress([str(big)], out) as bar:
        assert bar.active
        bar.advance(MIN_BYTES, 2)
    assert "2 finding(s)" in out.getvalue()


def test_feed_spans_cuts_the_same_lines_as_feed_block_without_copying() -> None:
    rng = random.Random(12)
    for _ in range(300):
        parts = []
        for _ in range(rng.randint(0, 30)):
            parts.append(b"y" * rng.choice((0, 1, 5, 15, 16, 17, 40, 200)))
        data = b"\n".join(parts) + rng.choice((b"", b"\n", b"tail"))
        a, b = LineSplitter(max_line=16), LineSplitter(max_line=16)
        got_a, got_b = [], []
        pos = 0
        while pos < len(data):
            size = rng.choice((1, 3, 16, 64, 100, 1000))
            chunk = data[pos : pos + size]
            pos += size
            first, block = a.feed_block(chunk)
            got_a.append((first, block))
            head, lo, hi = b.feed_spans(chunk)
            first_b = b.line_number + 1
            b.advance(head.count(b"\n"))
            b.advance(chunk.count(b"\n", lo, hi))
            got_b.append((first_b, head + chunk[lo:hi]))
        assert got_a == got_b, data
        assert a.close() == b.close()


def test_hyperscan_prefilter_is_safe_across_threads() -> None:
    """The cached prefilter is shared by the HTTP service's request threads."""
    import threading

    hs = pytest.importorskip("hyperscan")
    del hs
    from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter

    pf = HyperscanPrefilter(["out of memory", "killed"])
    block = b"ok\nCUDA out of memory\nfine\nKilled\n" * 2000
    want = _spans(pf, block)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                assert _spans(pf, block) == want
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_every_needle_has_one_gate_that_it_holds() -> None:
    from oomdoctor.prefilter.gates import plan

    lits = needles(_triggers())
    gates = plan(tuple(lits))
    covered = sorted(i for g in gates for i, _ in g.members)
    assert covered == list(range(len(lits)))  # each needle once
    for g in gates:
        for i, lit in g.members:
            assert lits[i] == lit and g.gate in lit
        assert g.exact == (len(g.members) == 1 and g.members[0][1] == g.gate)
    # shared gates: about half as many passes as needles (52%: the Kubernetes-limit context
    # triggers "limits", "requests:" and "memory:" share no piece with any other needle)
    assert len(gates) < len(lits) * 52 // 100
    shared = {g.gate: [lit for _, lit in g.members] for g in gates}
    assert b"kv cache size:" in shared[b"kv cache"]


def _gate_words() -> list[bytes]:
    """Pieces of the gates and needles, whole and cut short, in both cases."""
    from oomdoctor.prefilter.gates import plan

    pf = PurePrefilter(_triggers())
    words: list[bytes] = []
    for g in plan(tuple(pf.needles)):
        words.append(g.gate)
        for _, lit in g.members[:3]:
            words += [lit, lit[:-1], lit[1:], lit.upper()]
    return [*words, b"\n", b"\n", b"x", b"memory", b"Memory"]


@pytest.mark.parametrize("planned", [True, False])
def test_random_gate_pieces_agree_with_a_line_by_line_search(planned: bool) -> None:
    """Lines holding a gate but none of its needles, needles cut by one byte, several per line."""
    pf = _pure(planned)
    words = _gate_words()
    rng = random.Random(17)
    try:
        hs = _hyperscan()
    except pytest.skip.Exception:
        hs = None
    for _ in range(300):
        block = b"".join(rng.choice(words) + rng.choice((b"", b" ", b"\n")) for _ in range(rng.randint(0, 30)))
        got = pf.candidates(block)
        assert got == _candidates_by_hand(block, pf.needles), block
        if hs is not None:
            assert hs.candidates(block) == got, block


def test_a_gate_frequent_in_the_log_is_bypassed_and_results_stay_exact() -> None:
    pf = _pure()
    gate = next(g for g in pf.plan_for(b"") if g.gate == b"kv cache")
    gi = pf.plan_for(b"").index(gate)
    # thousands of lines holding the gate but none of its needles, a few holding needles
    noisy = b"".join(
        b"step %d: KV CACHE? no\n" % i if i % 500 else b"step %d: KV cache size: 1024 tokens\n" % i
        for i in range(5000)
    )
    assert gi not in pf._hot
    first = pf.candidates(noisy)
    assert gi in pf._hot  # too many hits: its needles are searched one by one for a while
    assert first == _candidates_by_hand(noisy, pf.needles)
    assert len(first) == 10
    again = pf.candidates(noisy)  # bypassed this time
    assert again == first
    for _ in range(pf._HOT_BLOCKS):
        pf.candidates(b"nothing\n")
    assert gi not in pf._hot  # tried again after a while
    assert pf.candidates(noisy) == first


def test_gates_are_planned_only_once_the_input_is_big_enough() -> None:
    pf = PurePrefilter(_triggers())
    block = TRICKY + b"\n" + b"filler line\n" * 1000
    want = _candidates_by_hand(block, pf.needles)
    seen = 0
    while seen <= pf._PLAN_AFTER:
        assert pf.candidates(block) == want
        seen += len(block) + pf._CALL_BYTES
        assert pf._gates is None or seen > pf._PLAN_AFTER
    assert pf.candidates(block) == want
    assert pf._gates is not None


def test_a_sweep_reports_every_member_including_twins_that_end_at_the_same_piece() -> None:
    """Members of one sweep: some end right after the piece, some share what follows it (twins,
    of which the pattern reports one), one starts with it, one holds it twice."""
    from oomdoctor.prefilter.gates import sweep_gate
    from oomdoctor.prefilter.pure import _sweep

    lits = [b"out of memory", b"no memory", b"memory pool", b"x mo", b"mo", b"memo mo!", b"max memory pool"]
    members = tuple(enumerate(lits))
    gate = sweep_gate(b"mo", members, 1.0)
    assert gate.sweep is not None and not gate.exact
    assert sorted(gate.labels[1:]) == list(range(len(lits)))
    assert 2 in {j for j, _, _ in gate.twins[1]}  # "no memory" ends where "memory pool" goes on
    words = [*lits, b"mem", b"memory", b"x m", b"max ", b"out of", b"pool", b"m", b"o", b"!"]
    rng = random.Random(5)
    for _ in range(2000):
        block = b"".join(rng.choice(words) + rng.choice((b"", b" ", b"\n")) for _ in range(rng.randint(0, 12)))
        found: dict[int, list[int]] = {}
        _sweep(block, gate, found)
        got = [(start, end, mask) for start, (end, mask) in sorted(found.items())]
        assert got == _candidates_by_hand(block, lits), block


def test_gates_planned_on_a_sample_sweep_for_short_shared_pieces() -> None:
    from oomdoctor.prefilter.gates import plan

    lits = tuple(needles(_triggers()))
    sample = b"".join(log.read_bytes() for log in LOGS).lower()
    gates = plan(lits, sample)
    sweeps = [g for g in gates if g.sweep is not None]
    assert sweeps and all(len(g.gate) <= 2 for g in sweeps)
    assert sorted(i for g in gates for i, _ in g.members) == list(range(len(lits)))
    assert len(gates) < len(plan(lits)) // 3  # a sweep covers what several find gates did
    assert not any(g.sweep is not None for g in plan(lits))  # no sample, no sweep


def test_hyperscan_databases_are_read_back_from_the_cache_and_a_bad_entry_is_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("hyperscan")
    from oomdoctor import cache
    from oomdoctor.prefilter.hsdb import database
    from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter

    monkeypatch.setenv("OOMDOCTOR_CACHE_DIR", str(tmp_path))
    trigs = _triggers()
    block = b"x\nRuntimeError: CUDA out of memory. Tried\nTraceback (most recent call last):\ny\n"
    want = HyperscanPrefilter(trigs).candidates(block)
    assert len(want) == 2
    (entry,) = tmp_path.glob("hyperscan-*.json")
    stored = cache.load("hyperscan", entry.stem.removeprefix("hyperscan-"))
    assert isinstance(stored, str)
    assert HyperscanPrefilter(trigs).candidates(block) == want  # read back
    # an entry holding another database fails the probe, a damaged one does not load: compiled again
    database([b"zzzq"], [0], b"zzzq")
    (other,) = set(tmp_path.glob("hyperscan-*.json")) - {entry}
    for bad in (other.read_bytes(), b"damaged"):
        entry.write_bytes(bad)
        assert HyperscanPrefilter(trigs).candidates(block) == want
        assert cache.load("hyperscan", entry.stem.removeprefix("hyperscan-")) == stored


def test_presence_and_the_main_scans_note_say_which_periodic_literals_a_stretch_holds() -> None:
    """What the scanner asks before it leaves a stretch unread: exact for ``Presence``; for the
    hyperscan prefilter's note of first occurrences, never "absent" for a literal that is there."""
    from oomdoctor.prefilter import presence as presence_mod
    from oomdoctor.prefilter.presence import Presence

    lits = [b"#running-req:", b"token usage", b"loss\":"]
    rng = random.Random(11)
    words = [b"x", b"#RUNNING-req:", b"#running-req:", b"token", b" usage", b"Token Usage", b"\n", b"\n\n",
             b'"LOSS":', b'loss\\":', b"loss\\u0022:", b'loss\\\\":']
    blocks = [b"".join(rng.choice(words) for _ in range(rng.randint(0, 60))) + b"\n" for _ in range(150)]

    def by_hand(text: bytes) -> int:
        """A literal, or one of its JSON forms (a record's bytes: ``loss\\":``)."""
        low = text.lower()
        return sum(1 << k for k, lit in enumerate(lits)
                   if lit in low or any(form in low for form, j in json_forms(lits) if j == k))

    # as built here (hyperscan when installed), without hyperscan (a sieve per literal), and without
    # the sieve's engine either (lower-cased and searched)
    kinds = [Presence(lits), Presence(lits, engine="sieve"), Presence(lits, engine="find")]
    assert kinds[1]._sieves[0] is not None or presence_mod.Sieve.for_needles([b"x"]) is None
    for block in blocks:
        lo = block.find(b"\n") + 1
        for p in kinds:
            assert p.which(block) == by_hand(block), block
            assert p.which(block, lo, len(block)) == by_hand(block[lo:]), block
    try:
        hs = _hyperscan()
    except pytest.skip.Exception:
        return
    from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter

    noted = HyperscanPrefilter(_triggers(), lits)
    for block in blocks:
        assert noted.candidates(block) == hs.candidates(block)  # the literals are never candidates
        cuts = sorted({0, len(block), *(i + 1 for i in range(len(block)) if block[i:i + 1] == b"\n")})
        for a in cuts[::3]:
            for b in cuts[::4]:
                if a <= b:
                    got = noted.present_in(block, a, b)
                    assert got is not None and got & by_hand(block[a:b]) == by_hand(block[a:b]), (block, a, b)
        assert noted.present_in(bytes(bytearray(block)), 0, len(block)) is None  # not the block it scanned
