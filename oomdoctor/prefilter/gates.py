"""Plan the pure-Python prefilter's searches: a few shared "gates" instead of one pass per needle.

A gate is a substring of one or more needles. Finding every line that holds the gate and checking
its needles on those lines only is exact (a line holding a needle holds each of its substrings),
and one ``bytes.find`` pass for a gate shared by ten needles costs about as much as one pass for
a single needle. The plan is a weighted set cover of the needles by gates, costed with what a
``bytes.find`` pass over lower-cased log text costs on CPython (its two-way / Horspool skip makes
long literals cheaper per byte than short ones: measured below) plus what the gate's hits cost to
verify. A gate that is a piece of a word every log is full of ("memory", "request") would hit on
most lines; such gates are priced out, and the prefilter still demotes at run time a gate that
turns out frequent in the log at hand (see ``PurePrefilter``).

A second kind of gate, the *sweep*, is a short piece (one or two bytes) searched by one compiled
``re`` pattern: the piece as its literal prefix, then a trie of what follows it in each member,
ending in a look-behind for the whole member. ``re`` skips to each occurrence of the piece in C
and rejects most of them after a byte or two, so a piece that is on every other line ("mo" of
"memory", "model", "module") still covers dozens of needles in about one pass. Its cost depends
on how often the piece occurs, so sweeps are planned only with a sample of the log at hand.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise

#: seconds per GiB for one ``bytes.find`` pass of a literal of this length that is absent from
#: the text (CPython 3.11, lower-cased vLLM serving log, 1 MiB blocks; medians over ~26,000
#: substrings of the built-in needles). Index = length, capped at the last entry.
#: Kept non-increasing, so a piece of one needle never beats the needle itself as its gate.
PASS_COST = (0.0, 1.6, 1.27, 1.05, 0.9, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.52, 0.49, 0.47, 0.43,
             0.41, 0.39, 0.38, 0.37, 0.36, 0.35, 0.34, 0.33, 0.32, 0.31, 0.3, 0.29, 0.29, 0.29,
             0.28, 0.28, 0.28, 0.28, 0.27, 0.27, 0.27, 0.27, 0.27, 0.27, 0.27, 0.25)

#: single bytes that are rare in logs (under 1 in 10,000 in the fixtures and a serving log):
#: ``find`` of one byte is ``memchr``, ~0.1 s/GiB, so such a byte is a very cheap gate
RARE_BYTES = frozenset(b"$~!@&?{}")
MEMCHR_COST = 0.12

#: words that real GPU-workload logs are full of; a gate inside one of them hits on most lines
COMMON_WORDS = (
    "info", "debug", "warning", "error", "the", "and", "for", "with", "from", "that", "this",
    "memory", "model", "cache", "request", "requests", "token", "tokens", "prompt", "generation",
    "throughput", "running", "waiting", "loading", "load", "size", "batch", "step", "epoch",
    "loss", "time", "total", "gpu", "cuda", "torch", "tensor", "python", "site-packages", "file",
    "line", "self", "return", "module", "worker", "engine", "server", "process", "rank", "pid",
    "version", "config", "params", "sampling", "seq", "len", "max", "num", "kv", "block",
    "blocks", "usage", "allocated", "reserved", "free", "device", "dtype", "float", "none", "true",
    "false", "completed", "chatcmpl", "post", "http", "ok", "received", "added", "finished",
    "assistant", "user", "system", "vllm", "llm", "api", "utils", "core", "executor", "runner",
    "output", "input", "layer", "layers", "weight", "weights", "param", "default", "using",
    "available", "compute", "capacity", "percent", "current", "start", "end", "ms", "sec",
    "args", "extra_args", "max_tokens", "prompt_token_ids", "stats", "status", "ids", "penalty",
)

#: seconds per GiB the hits of a gate inside a common word cost: a hit on a good share of the
#: ~2M lines in a GiB of log, each costing line bounds plus one ``find`` per member in Python
COMMON_PENALTY = 0.5
COMMON_MEMBER_PENALTY = 0.2


@dataclass(frozen=True)
class Gate:
    """Search ``gate``; on each line holding it, check ``members`` (needle index, needle).

    A sweep (``sweep`` set) instead finds its members in one pass of its pattern."""

    gate: bytes
    members: tuple[tuple[int, bytes], ...]
    #: the gate is the only member itself: a hit needs no check
    exact: bool
    #: estimated seconds/GiB of searching the members directly (one pass each)
    direct_cost: float
    #: a sweep: matches where a member ends (see :func:`sweep_gate`), else None
    sweep: re.Pattern[bytes] | None = None
    #: for a sweep: needle index of each capturing group (index 0 unused)
    labels: tuple[int, ...] = ()
    #: for a sweep: needle index -> (other member, its offset of ``gate``, the member) for the
    #: members that can end at the same occurrence of ``gate`` (the pattern reports only one)
    twins: dict[int, tuple[tuple[int, int, bytes], ...]] = field(default_factory=dict)


def pass_cost(lit: bytes) -> float:
    if len(lit) == 1:
        return MEMCHR_COST if lit[0] in RARE_BYTES else PASS_COST[1] + 4 * COMMON_PENALTY
    return PASS_COST[min(len(lit), len(PASS_COST) - 1)]


#: every piece of a common word
_COMMON = frozenset(w.encode()[a:b] for w in COMMON_WORDS for a in range(len(w)) for b in range(a + 1, len(w) + 1))


def _gate_cost(g: bytes, k: int) -> float:
    cost = pass_cost(g) + 0.01 * k  # + a little for verifying k needles per hit
    if len(g) > 1 and (len(g) < 4 or g.strip() in _COMMON or not g.strip()):
        cost += COMMON_PENALTY + COMMON_MEMBER_PENALTY * k
    return cost


#: what a sweep costs (CPython 3.11, lower-cased vLLM serving log, 1 MiB blocks): seconds/GiB
#: for ``re``'s literal-prefix loop; seconds per occurrence of the piece's first byte when the
#: piece has two (the loop compares the second inline); per occurrence of the piece (entering
#: the matcher) and per alternative tried after it (one per distinct next byte of the members).
#: Timings on a shared 2-core machine vary by ±20%; these are the values whose plans ran
#: fastest side by side (a serving log: 11 gates, 6 of them sweeps, ~12 s/GiB)
SWEEP_PASS = 0.8
SWEEP_PREFIX_HIT = 3e-9
SWEEP_HIT = 10e-9
SWEEP_ALT = 3e-9
#: sweeps are pieces of this many bytes at most
SWEEP_PIECE = 2
#: bytes of the sample counted to price sweeps
SAMPLE_BYTES = 64 << 10
_GIB = 2**30


def sweep_cost(freq: float, first_freq: float, alternatives: int) -> float:
    """Seconds/GiB of a sweep whose piece has frequency ``freq`` (its first byte
    ``first_freq``, for a two-byte piece) with ``alternatives`` distinct bytes after it."""
    return SWEEP_PASS + _GIB * (first_freq * SWEEP_PREFIX_HIT + freq * (SWEEP_HIT + SWEEP_ALT * alternatives))


@lru_cache(maxsize=4)
def plan(lits: tuple[bytes, ...], sample: bytes = b"") -> tuple[Gate, ...]:
    """Cover every needle (index into ``lits``) by a gate, greedily by cost per needle covered.

    ``sample``: lower-cased text of the log at hand; without one no sweep is planned (their
    cost is how often their piece occurs).

    Lazy greedy: a gate's cost per newly covered needle only grows as needles get covered, so a
    popped entry whose recomputed value still beats the next one is the true best.
    """
    cover: dict[bytes, set[int]] = {}
    sweepable: dict[bytes, set[int]] = defaultdict(set)
    after: dict[tuple[bytes, int], bytes] = {}  # (piece, needle) -> the byte after the piece
    for i, lit in enumerate(lits):
        if b"\n" in lit:  # cannot be verified within a line: searched as it is
            cover.setdefault(lit, set()).add(i)
            continue
        n = len(lit)
        for a in range(n):
            for b in range(a + 1, n + 1):
                piece = lit[a:b]
                if sample and b - a <= SWEEP_PIECE and i not in sweepable[piece]:
                    sweepable[piece].add(i)
                    after[piece, i] = lit[b : b + 1]
                if len(piece) == 1 and piece[0] not in RARE_BYTES:
                    continue
                if 1 < len(piece) < 4 and b - a != n:
                    continue
                cover.setdefault(piece, set()).add(i)
    # a piece of one needle costs at least as much as the needle itself (which needs no check),
    # unless it is a rare byte (memchr)
    lit_set = set(lits)
    cover = {g: m for g, m in cover.items() if len(m) > 1 or len(g) == 1 or g in lit_set}
    # a gate inside a needle that has a newline can't be used for it: only that needle itself
    nl = {i for i, lit in enumerate(lits) if b"\n" in lit}
    if nl:
        for g, holders in cover.items():
            if g not in lit_set:
                holders -= nl
    sample = sample[:SAMPLE_BYTES]
    freq = _frequencies(sample, sweepable) if sample else {}

    def cost(g: bytes, kind: str, new: set[int]) -> float:
        if kind == "find":
            return _gate_cost(g, len(new))
        first = freq.get(g[:1], 0.0) if len(g) > 1 else 0.0
        return sweep_cost(freq[g], first, len({after[g, i] for i in new}))

    members_of = {"find": cover, "sweep": sweepable}
    heap = [(cost(g, kind, m) / len(m), g, kind) for kind, c in members_of.items() for g, m in c.items() if m]
    heapq.heapify(heap)
    left = set(range(len(lits)))
    gates: list[Gate] = []
    while left and heap:
        _, g, kind = heapq.heappop(heap)
        new = members_of[kind][g] & left
        if not new:
            continue
        value = cost(g, kind, new) / len(new)
        if heap and value > heap[0][0]:
            heapq.heappush(heap, (value, g, kind))
            continue
        left -= new
        members = tuple(sorted((i, lits[i]) for i in new))
        direct = sum(pass_cost(m) for _, m in members)
        if kind == "sweep":
            gates.append(sweep_gate(g, members, direct))
        else:
            exact = len(members) == 1 and members[0][1] == g
            gates.append(Gate(g, members, exact, direct))
    return tuple(gates)


def _frequencies(sample: bytes, pieces: Iterable[bytes]) -> dict[bytes, float]:
    """How often each piece (one or two bytes) occurs in ``sample``, per byte: each byte and
    each pair of bytes counted in one pass (not one ``count`` pass per piece: ~30 ms)."""
    singles = Counter(sample)
    pairs = Counter(pairwise(sample))
    n = len(sample)
    return {g: (singles[g[0]] if len(g) == 1 else pairs[g[0], g[1]]) / n for g in pieces}


def sweep_gate(piece: bytes, members: tuple[tuple[int, bytes], ...], direct_cost: float) -> Gate:
    """A sweep for ``members``, each anchored at the first occurrence of ``piece`` in it.

    The pattern is ``piece`` followed by a trie of the rest of each member; where a member ends,
    a look-behind checks the whole member and an empty capturing group names it. A match starts
    at the occurrence of ``piece``; two members whose rests are one a prefix of the other can end
    at the same occurrence, and the pattern reports only one of them: they are each other's twins.
    """
    rests = {i: lit[lit.index(piece) + len(piece) :] for i, lit in members}
    offsets = {i: lit.index(piece) for i, lit in members}
    lits = dict(members)
    labels: list[int] = [-1]

    def node(items: list[tuple[bytes, int]]) -> str:
        ends = [i for rest, i in items if not rest]
        follow: dict[int, list[tuple[bytes, int]]] = defaultdict(list)
        for rest, i in items:
            if rest:
                follow[rest[0]].append((rest[1:], i))
        alts = [_lit(bytes([byte])) + node(sub) for byte, sub in sorted(follow.items())]
        for i in ends:
            labels.append(i)
            behind = f"(?<={_lit(lits[i])})" if offsets[i] else ""
            alts.append(behind + "()")
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    source = _lit(piece) + node([(rests[i], i) for i, _ in members])
    twins: dict[int, tuple[tuple[int, int, bytes], ...]] = {}
    for i, _ in members:
        same = tuple(
            (j, offsets[j], lits[j])
            for j, _ in members
            if j != i and (rests[j].startswith(rests[i]) or rests[i].startswith(rests[j]))
        )
        if same:
            twins[i] = same
    return Gate(piece, members, False, direct_cost, re.compile(source.encode("latin-1")), tuple(labels), twins)


def _lit(text: bytes) -> str:
    """``text`` as a regex matching it literally (latin-1 keeps every byte value)."""
    return re.escape(text.decode("latin-1"))
