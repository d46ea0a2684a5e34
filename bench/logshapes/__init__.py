"""The log shapes ``genlog.py`` writes: what one kind of workload prints, built from parts.

A shape is a start-up banner, request or training traffic (built into 1 MiB segments once and
repeated up to the requested size) and four failures spread through the file, each followed by the
restart that a supervisor would do. Every part takes the generator's ``random.Random`` so that a
log is the same bytes on every run. ``expect`` is the kind oomdoctor should report for each of the
failures: the benchmark checks it finds exactly four of that kind and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from random import Random

#: (rng, second) -> lines printed at start-up (the second is the log's clock)
Head = Callable[[Random, int], list[str]]
#: (rng, second, bytes wanted) -> (about that many bytes of traffic, the clock after it)
Traffic = Callable[[Random, int, int], tuple[bytes, int]]
#: (rng, k) -> the k-th failure (0..3) and the restart after it
Failure = Callable[[Random, int], list[str]]


@dataclass(frozen=True)
class Shape:
    """One kind of log: how to write it and what oomdoctor should find in it."""

    name: str
    about: str
    head: Head
    traffic: Traffic
    failure: Failure
    expect: str
    #: makes the function applied to every piece written (start-up, segments, failures), e.g. a log
    #: collector's wrapping; one per log, so that a wrapper with state (a clock) starts afresh
    wrap: Callable[[], Callable[[bytes], bytes]] | None = None


_TEXT = (
    "the of and to in is you that it for was on are as with his they be at one have this from or "
    "had by word but what some we can out other were all there when up use your how said an each "
    "she which do their time if will way about many then them write would like so these her long "
    "make thing see him two has look more day could go come did number sound no most people my over "
    "know water than call first who may down side been now find any new work part take get place "
    "made live where after back little only round man year came show every good me give our under "
    "name very through just form sentence great think say help low line differ turn cause much mean "
    "before move right boy old too same tell does set three want air well also play small end put "
    "home read hand port large spell add even land here must big high such follow act why ask men "
    "change went light kind off need house picture try us again animal point mother world near build "
    "self earth father head stand own page should country found answer school grow study still learn "
    "plant cover food sun four between state keep eye never last let thought city tree cross farm "
    "hard start might story saw far sea draw left late run don't while press close night real life "
    "few north memory kernel cache token model batch summary translate explain python function error "
    "gradient tensor matrix vector request response latency throughput server client queue"
)
WORDS = _TEXT.split()


def clock(sec: float) -> tuple[int, int, int, float]:
    """The log's clock at second ``sec`` of a day: hour, minute, second, and the fraction of it."""
    whole = int(sec)
    m, s = divmod(whole, 60)
    h, m = divmod(m, 60)
    return h % 24, m, s, sec - whole


def vllm_ts(sec: int) -> str:
    """vLLM's ``%m-%d %H:%M:%S`` on 19 August."""
    h, m, s, _ = clock(sec)
    return f"08-19 {h:02d}:{m:02d}:{s:02d}"


def iso_ts(sec: float) -> str:
    """``2024-08-19 HH:MM:SS,mmm`` (Python logging's default asctime)."""
    h, m, s, frac = clock(sec)
    return f"2024-08-19 {h:02d}:{m:02d}:{s:02d},{int(frac * 1000):03d}"


def prompt(rng: Random) -> str:
    n = rng.choice((12, 30, 60, 120, 250))
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def fill(rng: Random, sec: int, target: int, step: Callable[[Random, int], list[str]]) -> tuple[bytes, int]:
    """Call ``step`` once per second of the clock until about ``target`` bytes are written."""
    lines: list[str] = []
    size = 0
    while size < target:
        new = step(rng, sec)
        lines.extend(new)
        size += sum(len(x) + 1 for x in new)
        sec += 1
    return ("\n".join(lines) + "\n").encode(), sec
