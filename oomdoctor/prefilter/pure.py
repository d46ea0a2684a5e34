"""The pure-Python prefilter: a sieve rules out most of a block (see :mod:`.sieve`); the rest is
lower-cased and searched exactly, one pass per gate (see :mod:`.gates`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from oomdoctor.prefilter.gates import SAMPLE_BYTES, Gate, plan
from oomdoctor.prefilter.interface import needles, with_json_forms
from oomdoctor.prefilter.sieve import MIN_TEXT, Sieve

#: :meth:`PurePrefilter.mask` calls after which the sieve is built for them (a line costs ~60 µs
#: needle by needle, ~1 µs sieved; building it ~7 ms)
MASKS_BEFORE_SIEVE = 64


class PurePrefilter:
    """Sieve the block (:mod:`.sieve`); lower-case each stretch the sieve leaves (C speed), then
    one pass per gate over it.

    ``bytes.find`` over a whole block runs at memory speed (a few hundred MB/s to GB/s per
    literal), far faster than a regex alternation or any per-line Python work, but one pass per
    needle (~240 of them) adds up. So the needles are covered by fewer gates
    (:mod:`oomdoctor.prefilter.gates`), of two kinds:

    * a *sweep* is one ``re`` pass that finds every member ending anywhere in the block, checking
      them in C after a short piece they share (see :func:`~oomdoctor.prefilter.gates.sweep_gate`);
    * a *find* gate is a shared substring: each line holding it is checked for the gate's
      needles. After a hit the search resumes at the end of the line, so a gate that appears on
      many lines costs one ``find`` per line holding it plus the checks; a gate that gets more
      hits in a block than its needles' own passes would cost is dropped for the rest of that
      block and for the next blocks (``_HOT_BLOCKS``): its needles are then searched one by one.

    Either way every line holding a needle is found, with its exact mask. The needles' JSON forms
    (:func:`~oomdoctor.prefilter.interface.json_forms`) are searched as literals of their own,
    and a line holding one is reported as holding its needle. Sweeps are priced by
    how often their piece occurs in the log at hand, so the gates are planned on the first block
    after ``_PLAN_AFTER`` bytes; before that, needles are searched one by one.
    """

    #: it needs nothing but a block's bytes: worker processes may run it (see pool.py)
    runs_in_workers = True
    #: blocks a gate found too frequent is bypassed before it is tried again
    _HOT_BLOCKS = 16
    #: bytes searched needle by needle before the gates are planned: about what planning costs
    #: (~0.3 s; needle by needle is ~0.14 s per MiB), so a short log does not pay for it
    _PLAN_AFTER = 2 << 20
    #: what one search needle by needle costs besides its bytes, in bytes: a call per needle
    #: (~2 µs), so many small texts (what the sieve leaves, lines cut by block ends) plan too
    _CALL_BYTES = 8 << 10
    #: lines of one needle in a busy range that make it loud, and how many may be (each costs a
    #: pass of its own over every range)
    _LOUD_LINES = 16
    _MAX_LOUD = 8
    #: what one gate hit is priced at (line bounds, plus one ``find`` per member), in seconds, for
    #: the bypass budget. Calibrated on the bench's seven log shapes and on a gate on every line
    #: (bench/genlog.py, 32 MiB): at 0.4 / 0.15 µs the common gates of ordinary logs were bypassed
    #: and every shape was 10-35 % slower than with no bypass at all; at these values no shape
    #: bypasses a gate, and a gate on every line still costs 0.045 s/MiB, as bypassed (without
    #: the bypass: 0.13-0.17 s/MiB). Re-measured for issue 17 (64 MiB of each of the seven
    #: shapes): no gate is ever bypassed, and candidates cost the same with the bypass as
    #: never or always bypassing (k8s-json 0.011 / 0.010 / 0.009 s/MiB, vllm-stats 0.013 /
    #: 0.011 / 0.011, within noise): kept only for a log where a gate is on every line
    _HIT_COST = 0.1e-6
    _MEMBER_COST = 0.04e-6

    def __init__(self, triggers: Sequence[str], present: Sequence[bytes] = ()) -> None:
        self.needles = needles(triggers)
        searched = with_json_forms(self.needles)
        #: what is searched: the needles (bit i: needle i), then their JSON forms
        self._lits = tuple(lit for lit, _ in searched)
        #: the bit of each form's needle, in order (a form's own bit is folded into it)
        self._form_needle = tuple(1 << i for _, i in searched[len(self.needles) :])
        self._needle_bits = (1 << len(self.needles)) - 1
        self._gates: tuple[Gate, ...] | None = None
        self._hot: dict[int, int] = {}  # gate index -> blocks left to bypass it
        self._seen = 0
        #: built the first time a text is long enough to be sieved (see _sieve_for): a short
        #: log never compiles it (~15 ms)
        self._sieve: Sieve | None = None
        self._sieve_built = False
        self._masks_asked = 0
        self._loud: tuple[int, ...] = ()  # needles searched alone, not sieved (see _quieten)
        #: literals each sieved range is asked about too, from the text the sieve makes of it
        #: anyway (see :meth:`present_in`), and a sieve of them and their JSON forms
        self.present_literals = tuple(present)
        self._present = Sieve.for_needles([form for form, _ in with_json_forms(self.present_literals)]) if present else None
        self._local = threading.local()  # (threads of the HTTP service share this prefilter)

    def noted_in(self, block: bytes, a: int, b: int) -> bool | None:
        """Whether ``block[a:b]`` holds one of the ``present`` literals, from this thread's latest
        :meth:`candidates` call; None when that call did not cover it or could not tell (its
        range was not all sieved: short, or the sieve resting)."""
        got = getattr(self._local, "noted", None)
        if got is None or got[0] is not block or not got[1] <= a <= b <= got[2]:
            return None
        return got[3]

    def present_in(self, block: bytes, a: int, b: int) -> int | None:
        """Which ``present`` literals may be in ``block[a:b]`` (bit ``k``: literal ``k``): none
        where the latest :meth:`candidates` call noted that its range holds none of them;
        else None (not known: ask them)."""
        return 0 if self.noted_in(block, a, b) is False else None

    def plan_for(self, sample: bytes) -> tuple[Gate, ...]:
        """The gates, planned on the first call, pricing sweeps by ``sample`` (lower-cased text of
        the log at hand; the pool plans on slices from across a file before forking workers)."""
        if self._gates is None:
            self._gates = plan(self._lits, sample[:SAMPLE_BYTES])
        return self._gates

    def mask(self, text: bytes) -> int:
        """The needles ``text`` (a line, say) holds anywhere (ASCII case folded), as a bit mask:
        once the sieve is built, its one call says "none" for most lines; the others are tested
        needle by needle."""
        sieve = self._sieve
        if sieve is None and not self._sieve_built:
            # one line is no reason to build it, many are: where worker processes answer the
            # candidates, the lines read here are asked of this call alone
            self._masks_asked += 1
            if self._masks_asked >= MASKS_BEFORE_SIEVE:
                sieve = self._sieve_for(MIN_TEXT)
        # where the sieve says none, only the loud needles (left out of it) may be there
        ask = range(len(self._lits)) if sieve is None or sieve.holds(text) else self._loud
        if not ask:
            return 0
        low = text.lower()
        return self._fold(sum(1 << i for i in ask if self._lits[i] in low))

    def _fold(self, mask: int) -> int:
        """``mask`` with each JSON form's bit replaced by its needle's."""
        forms = mask >> len(self.needles)
        mask &= self._needle_bits
        for bit in self._form_needle:
            if not forms:
                break
            if forms & 1:
                mask |= bit
            forms >>= 1
        return mask

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        n = len(block) if hi is None else hi
        self._local.noted = None
        if not self.needles or n <= lo:
            return []
        # only the stretches the sieve cannot rule out are searched (see sieve.py); the needles
        # it leaves out as loud are searched alone, in the whole range
        sieve, loud = self._sieve_for(n - lo), self._loud
        if sieve is None:
            stretches = [(lo, n)]
        elif self._present is None:
            stretches = sieve.ranges(block, lo, n)
        else:
            stretches, held = sieve.ranges_noting(block, lo, n, self._present)
            self._local.noted = (block, lo, n, held)
        out: list[tuple[int, int, int]] = []
        whole = len(block)
        for a, b in stretches:
            found = self._exact(block.lower() if a == 0 and b == whole else block[a:b].lower())
            out.extend((start + a, end + a, mask) for start, (end, mask) in sorted(found.items()))
        if loud and stretches != [(lo, n)]:
            lowered = block[lo:n].lower()
            found = {start - lo: [end - lo, mask] for start, end, mask in out}
            for i in loud:
                _search(lowered, self._lits[i], 1 << i, 0, found)
            out = [(start + lo, end + lo, mask) for start, (end, mask) in sorted(found.items())]
        if sieve is not None and sieve.busy:
            self._quieten(out)
        if self._form_needle:
            forms = ~self._needle_bits
            fold = self._fold
            out = [(start, end, fold(mask) if mask & forms else mask) for start, end, mask in out]
        return out

    def _sieve_for(self, size: int) -> Sieve | None:
        """The sieve, built the first time a text of ``size`` bytes is long enough to be sieved."""
        if not self._sieve_built and size >= MIN_TEXT:
            self._sieve_built = True
            self._sieve = Sieve.for_needles(self._lits)
        return self._sieve

    def _quieten(self, found: list[tuple[int, int, int]]) -> None:
        """After the sieve found a range busy: the needles on ``_LOUD_LINES`` or more of its
        lines are loud, searched alone from now on, and the sieve is rebuilt without them (a
        log that prints one of them all the time, a traceback frame in ``/vllm/``, say, no
        longer makes every piece answer yes)."""
        counts: dict[int, int] = {}
        for _, _, mask in found:
            while mask:
                low = mask & -mask
                counts[low] = counts.get(low, 0) + 1
                mask ^= low
        new = [bit.bit_length() - 1 for bit, c in counts.items() if c >= self._LOUD_LINES]
        loud = sorted({*self._loud, *new})[: self._MAX_LOUD]
        if len(loud) > len(self._loud):
            self._loud = tuple(loud)
            self._sieve = Sieve.for_needles([lit for i, lit in enumerate(self._lits) if i not in self._loud])

    def _exact(self, lowered: bytes) -> dict[int, list[int]]:
        """Every line of ``lowered`` holding a needle: line start -> [end, mask]."""
        size = len(lowered)
        found: dict[int, list[int]] = {}  # line start -> [end, mask]
        if self._gates is None and self._seen < self._PLAN_AFTER:
            self._seen += size + self._CALL_BYTES
            for i, needle in enumerate(self._lits):
                _search(lowered, needle, 1 << i, 0, found)
            return found
        gates = self.plan_for(lowered)
        find = lowered.find
        rfind = lowered.rfind
        hot = self._hot
        per_byte = size / 2**30
        for gi, gate in enumerate(gates):
            if gate.sweep is not None:
                _sweep(lowered, gate, found)
                continue
            left = hot.get(gi)  # one read: threads of the HTTP service share this prefilter
            if left is not None:
                if left > 1:
                    hot[gi] = left - 1
                else:
                    hot.pop(gi, None)
                for i, needle in gate.members:
                    _search(lowered, needle, 1 << i, 0, found)
                continue
            g = gate.gate
            pos = find(g)
            if pos < 0:
                continue
            members = gate.members
            if gate.exact:
                budget = -1
                bit = 1 << members[0][0]
            else:
                # more hits than this would cost more than searching the members one by one
                budget = int(gate.direct_cost * per_byte / (self._HIT_COST + self._MEMBER_COST * len(members)))
                budget = max(budget, 8)
                bit = 0
            while pos >= 0:
                start = rfind(b"\n", 0, pos) + 1
                end = find(b"\n", pos + len(g))
                if end < 0:
                    end = size
                if bit:
                    mask = bit
                else:
                    mask = 0
                    for i, needle in members:
                        if find(needle, start, end) >= 0:
                            mask |= 1 << i
                    budget -= 1
                    if budget < 0:  # frequent here: the members one by one for the rest
                        hot[gi] = self._HOT_BLOCKS
                        for i, needle in members:
                            _search(lowered, needle, 1 << i, start, found)
                        break
                if mask:
                    slot = found.get(start)
                    if slot is None:
                        found[start] = [end, mask]
                    else:
                        slot[1] |= mask
                if end >= size:
                    break
                pos = find(g, end + 1)
        return found


def _sweep(lowered: bytes, gate: Gate, found: dict[int, list[int]]) -> None:
    """Add to ``found`` every line of ``lowered`` holding a member of the sweep ``gate``."""
    assert gate.sweep is not None
    search = gate.sweep.search
    labels = gate.labels
    twins = gate.twins
    startswith = lowered.startswith
    m = search(lowered)
    while m is not None:
        at = m.start()  # where the gate's piece is
        i = labels[m.lastindex or 0]
        bits = 1 << i
        for j, offset, lit in twins.get(i, ()):  # members that may end here too: not reported
            if at >= offset and startswith(lit, at - offset):
                bits |= 1 << j
        start = lowered.rfind(b"\n", 0, at) + 1
        slot = found.get(start)
        if slot is None:
            end = lowered.find(b"\n", at)
            found[start] = [len(lowered) if end < 0 else end, bits]
        else:
            slot[1] |= bits
        m = search(lowered, at + 1)


def _search(lowered: bytes, needle: bytes, bit: int, pos: int, found: dict[int, list[int]]) -> None:
    """Add ``bit`` to every line of ``lowered[pos:]`` (``pos`` at a line start) holding ``needle``."""
    find = lowered.find
    rfind = lowered.rfind
    size = len(lowered)
    pos = find(needle, pos)
    while pos >= 0:
        start = rfind(b"\n", 0, pos) + 1
        slot = found.get(start)
        if slot is None:
            end = find(b"\n", pos + len(needle))
            if end < 0:
                end = size
            found[start] = [end, bit]
        else:
            end = slot[0]
            slot[1] |= bit
        if end >= size:
            break
        pos = find(needle, end + 1)
