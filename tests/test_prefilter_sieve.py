"""The sieve before the pure prefilter's exact search: it may only say yes too often, never no."""

from __future__ import annotations

import random

import pytest

from oomdoctor.prefilter import PurePrefilter
from oomdoctor.prefilter import sieve as sieve_mod
from oomdoctor.prefilter.pure import MASKS_BEFORE_SIEVE
from oomdoctor.prefilter.sieve import MIN_TEXT, PIECE, PROBE, REST_CALLS, Sieve
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import _BUILTIN_TRIGGERS
from tests.test_prefilter import _candidates_by_hand as _by_hand


def _triggers() -> list[str]:
    return [*default_pack().all_triggers(), *_BUILTIN_TRIGGERS]


FILLER = [
    b"INFO 12-03 10:00:01 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    b'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    b"{'loss': 1.7009, 'grad_norm': 2.81, 'learning_rate': 1.9e-05, 'epoch': 0.42}",
    b" 48%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 9371/19500 [5:27:59<6:40:20,  2.37s/it]",
    b"bytes that are not UTF-8: \xff\xfe\xc3 and a lone continuation \x80",
    b"",
]


def _needle_words(lits: list[bytes], rng: random.Random) -> list[bytes]:
    """Needles as they may appear: upper-cased, title-cased, cut short by a byte, whole."""
    words = []
    for lit in rng.sample(lits, 40):
        words += [lit, lit.upper(), lit.title(), lit[:-1], lit[1:]]
    return words


def _log(rng: random.Random, words: list[bytes], size: int, needle_every: int) -> bytes:
    lines = []
    total = 0
    while total < size:
        if rng.randrange(needle_every) == 0:
            word = rng.choice(words)
            line = rng.choice(FILLER)[: rng.randrange(60)] + word + rng.choice(FILLER)[: rng.randrange(40)]
        else:
            line = rng.choice(FILLER)
        if rng.randrange(500) == 0:  # now and then a line longer than a piece
            line = line + b"x" * (PIECE + rng.randrange(PIECE))
        lines.append(line)
        total += len(line) + 1
    return b"\n".join(lines)


@pytest.mark.parametrize("needle_every", [3, 2000, 30_000])
def test_the_sieved_search_finds_every_line_a_line_by_line_search_finds(needle_every: int) -> None:
    """Needles dense, sparse and rare; ASCII, UTF-8 and bytes that are not UTF-8; lines longer
    than a piece; a last line without a newline; sub-ranges that start and end inside the block."""
    pf = PurePrefilter(_triggers())
    assert pf._sieve_for(MIN_TEXT) is not None
    rng = random.Random(needle_every)
    words = _needle_words(pf.needles, rng)
    left_out = 0
    for round_ in range(4):
        block = _log(rng, words, MIN_TEXT * 3 + rng.randrange(MIN_TEXT), needle_every)
        left_out += len(block) - sum(b - a for a, b in Sieve.for_needles(pf.needles).ranges(block))
        assert pf.candidates(block) == _by_hand(block, pf.needles), round_
        lo = block.index(b"\n", len(block) // 7) + 1
        hi = block.rindex(b"\n", 0, len(block) - len(block) // 9)
        assert pf.candidates(block, lo, hi) == _by_hand(block, pf.needles, lo, hi), round_
    if needle_every > 3:
        assert left_out > 0  # the sieve did leave pieces out


def test_pieces_that_hold_no_needle_are_left_out_and_the_rest_are_whole_lines() -> None:
    sieve = Sieve.for_needles([b"out of memory", b"tried to allocate"])
    assert sieve is not None
    quiet = b"nothing to see here, just a long enough line of log text\n" * (4 * PIECE // 57)
    block = quiet + b"x\nCUDA OUT OF MEMORY. Tried to allocate 2 GiB\n" + quiet
    ranges = sieve.ranges(block)
    assert len(ranges) == 1
    (a, b), at = ranges[0], block.index(b"CUDA")
    assert a <= at < b and b - a <= 2 * PIECE
    assert a == 0 or block[a - 1 : a] == b"\n"
    assert block[b - 1 : b] == b"\n"
    assert sieve.ranges(quiet + quiet) == []


def test_a_short_text_is_not_sieved() -> None:
    sieve = Sieve.for_needles([b"out of memory"])
    assert sieve is not None
    text = b"no needle here\n" * (MIN_TEXT // 15 - 1)
    assert sieve.ranges(text) == [(0, len(text))]


def test_a_busy_text_stops_the_sieve_for_a_while_and_it_asks_again_later() -> None:
    sieve = Sieve.for_needles([b"out of memory"])
    assert sieve is not None
    busy = (b"filler line\n" * 100 + b"out of memory\n") * (8 * PROBE * PIECE // 1214)
    assert sieve.ranges(busy) == [(0, len(busy))]  # the first PROBE pieces said yes: the rest too
    assert sieve._rest == REST_CALLS
    quiet = b"filler line\n" * (8 * PIECE // 12)
    for _ in range(REST_CALLS):
        assert sieve.ranges(quiet) == [(0, len(quiet))]  # resting: not asked
    assert sieve.ranges(quiet) == []  # asked again


def test_needles_beyond_ascii_are_read_byte_for_byte() -> None:
    """A custom rule's trigger in Japanese: the text is read as Latin-1, one character a byte."""
    lits = ["メモリ不足".encode(), b"out of memory"]
    sieve = Sieve.for_needles(lits)
    assert sieve is not None
    filler = "ログの行です、何もない\n".encode() * (4 * PIECE // 34)
    block = filler + "エラー: メモリ不足です\n".encode() + filler + b"\xff\xfe not UTF-8\n"
    (a, b), = sieve.ranges(block)
    assert a <= block.index("メモリ不足".encode()) < b
    assert sieve.ranges(filler * 2) == []


def test_regex_syntax_in_needles_is_literal() -> None:
    lits = [b"$ ", b"(raylet)", b"[tensorrt-llm]", b"args {", b"\\vllm\\", b"a.b*c+d?"]
    sieve = Sieve.for_needles(lits)
    assert sieve is not None
    filler = b"plain words only here and there, abbcd\n" * (4 * PIECE // 40)
    assert sieve.ranges(filler) == []
    for lit in lits:
        block = filler + b"x " + lit.upper() + b" y\n" + filler
        assert len(sieve.ranges(block)) == 1, lit


def test_no_sieve_where_it_could_not_be_exact_or_has_no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Sieve.for_needles([b"two\nlines", b"out of memory"]) is None
    assert Sieve.for_needles([]) is None
    monkeypatch.setattr(sieve_mod, "_validator", lambda source: None)
    assert Sieve.for_needles([b"out of memory"]) is None
    pf = PurePrefilter(_triggers())
    assert pf._sieve_for(MIN_TEXT) is None
    block = b"filler\n" * MIN_TEXT + b"CUDA out of memory\n"
    assert pf.candidates(block) == _by_hand(block, pf.needles)


def test_the_mask_of_a_line_is_every_needle_it_holds() -> None:
    """What the scanner asks of a line normalising changed, and of the evidence needles a
    candidate holds: the sieve answers for most lines, the rest are tested needle by needle.
    Lines asked alone build the sieve after a while (where worker processes find the candidates,
    the scanning process asks nothing else): the answers are the same before and after."""
    pf = PurePrefilter(_triggers())
    rng = random.Random(11)
    words = _needle_words(pf.needles, rng)
    for i in range(300):
        line = rng.choice(FILLER)[: rng.randrange(50)] + b" ".join(rng.choice(words) for _ in range(rng.randrange(3)))
        ((_, _, want),) = _by_hand(line, pf.needles) or [(0, 0, 0)]
        assert pf.mask(line) == want, line
        assert (pf._sieve is not None) == (i + 1 >= MASKS_BEFORE_SIEVE)
    assert pf.mask(b"torch.OutOfMemoryError: CUDA out of memory \xff\xfe") != 0  # not UTF-8
    assert pf.mask(b"nothing at all") == 0


def test_a_needle_on_every_other_line_turns_loud_and_is_searched_alone() -> None:
    """A log that prints one needle all the time (a traceback frame in a package that names an
    engine): the sieve found it busy, so that needle leaves the sieve, which rules out the
    rest of the text again; the candidates stay those of a line-by-line search."""
    pf = PurePrefilter(_triggers())
    frame = b'  File "/usr/lib/python3/dist-packages/vllm/engine/core.py", line 12, in step'
    noisy = b"".join(
        (b"INFO 12-03 request %d done\n" % i) + (frame + b"\n" if i % 40 == 0 else b"") for i in range(40_000)
    )
    rare = noisy[: len(noisy) // 2] + b"torch.OutOfMemoryError: CUDA out of memory\n" + noisy[len(noisy) // 2 :]
    assert pf._loud == ()
    assert pf.candidates(noisy) == _by_hand(noisy, pf.needles)
    loud = {pf.needles[i] for i in pf._loud}
    assert loud == {b"/vllm/", b'file "', b'", line '}  # what the frame holds
    assert pf._sieve is not None
    left = sum(b - a for a, b in pf._sieve.ranges(noisy))
    assert left == 0  # without it, nothing in the text can hold a needle
    assert pf.candidates(rare) == _by_hand(rare, pf.needles)
    assert pf.candidates(rare, 4096 + rare.index(b"\n", 4096) + 1 - 4096, len(rare) - 1) == _by_hand(
        rare, pf.needles, rare.index(b"\n", 4096) + 1, len(rare) - 1
    )
    assert pf.mask(frame) == _by_hand(frame, pf.needles)[0][2]
    assert pf.mask(b"CUDA out of memory " + frame) == _by_hand(b"CUDA out of memory " + frame, pf.needles)[0][2]


def test_a_short_log_never_builds_the_sieve() -> None:
    """Compiling it costs ~15 ms of start-up: a 50-line log's lines are searched exactly."""
    pf = PurePrefilter(_triggers())
    block = b"INFO step 1\nCUDA out of memory. Tried to allocate 2 GiB\n" * 20
    assert pf.candidates(block) == _by_hand(block, pf.needles)
    assert pf.mask(b"CUDA out of memory") == _by_hand(b"CUDA out of memory", pf.needles)[0][2]
    assert not pf._sieve_built and pf._sieve is None
    big = block * (MIN_TEXT // len(block) + 1)
    assert pf.candidates(big) == _by_hand(big, pf.needles)
    assert pf._sieve is not None


# -- noting other needles from the same text (the periodic needles: see PurePrefilter.present_in)

QUIET = b"INFO 12-03 10:00:01 [loggers.py:116] nothing to see here\n" * 4000  # ~230 KiB, 8 pieces
BATCH = b"[2025-06-01 10:01:00 TP0] Decode batch. #running-req: 7, token usage: 0.51\n"


@pytest.mark.parametrize(
    "block, held",
    [
        (QUIET, False),
        (QUIET[: len(QUIET) // 2] + BATCH.upper() + QUIET[len(QUIET) // 2 :], True),  # (ASCII case folded)
        (QUIET + BATCH, True),  # in the last piece
        (QUIET[:MIN_TEXT - 100], None),  # too short to be sieved: not known
        (QUIET + "é".encode() + b"\n", None),  # not ASCII: the pieces are not asked as text
    ],
    ids=["none", "one", "last-piece", "short", "not-ascii"],
)
def test_the_sieve_notes_whether_a_range_holds_another_sieve_s_needles(block: bytes, held: bool | None) -> None:
    sieve = Sieve([b"out of memory"])
    also = Sieve([b"#running-req:"])
    ranges, noted = sieve.ranges_noting(block, 0, len(block), also)
    assert noted is held
    assert ranges == sieve.ranges(block)  # the answer about its own needles is the same


def test_a_busy_range_notes_only_what_it_asked() -> None:
    busy = b"CUDA out of memory on this line\n" * 12000
    sieve, also = Sieve([b"out of memory"]), Sieve([b"#running-req:"])
    assert sieve.ranges_noting(busy + BATCH, 0, None, also)[1] is None  # (not every piece was asked)
    sieve = Sieve([b"out of memory"])
    assert sieve.ranges_noting(BATCH + busy, 0, None, also)[1] is True  # (asked before it stopped)


def test_the_pure_prefilter_says_a_range_holds_no_periodic_needle_only_where_it_noted_so() -> None:
    import threading

    pre = PurePrefilter(_triggers(), present=(b"#running-req:",))
    with_batch = QUIET + BATCH
    pre.candidates(QUIET)
    assert pre.present_in(QUIET, 0, len(QUIET)) == 0
    assert pre.present_in(QUIET, 100, 2000) == 0
    assert pre.present_in(with_batch, 0, 10) is None  # another block: not known
    other: list[int | None] = []
    thread = threading.Thread(target=lambda: (pre.candidates(with_batch), other.append(pre.present_in(with_batch, 0, 10))))
    thread.start()
    thread.join()
    assert other == [None]  # it holds one: asked, not taken from the note
    assert pre.present_in(QUIET, 0, len(QUIET)) == 0  # (each thread its own note)
    pre.candidates(QUIET, 0, len(QUIET) // 2)
    assert pre.present_in(QUIET, 0, len(QUIET)) is None  # beyond the range it sieved
