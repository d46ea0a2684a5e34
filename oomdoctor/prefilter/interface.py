"""What every prefilter answers: the candidate lines of a block, with the needles each holds.

A prefilter searches the rules' literal triggers case-insensitively (ASCII case folding) in a
whole block of complete lines; only the lines that hold one meet the full regexes. Every
implementation (:mod:`.hyperscan_path`, :mod:`.pure`, :class:`.pool.Precomputed`) returns the
same spans for the same block.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Sequence
from typing import Protocol


class Prefilter(Protocol):
    """Finds a block's candidate lines.

    Each needle is also searched in the forms a JSON string holds it in (:func:`json_forms`),
    reported as the needle itself: a JSON log record's bytes then show every needle its message
    holds, unless an escape the forms do not cover hides one (:func:`oomdoctor.reader.only_cut_by_normalise`).

    A prefilter may also have ``mask(text: bytes) -> int``, the bit mask of the needles ``text``
    holds anywhere (ASCII case folded), where one call costs much less than testing each trigger
    (hyperscan: one scan). The scanner asks it about lines that normalising changed; without it,
    every trigger is tested on such a line."""

    #: the literals searched (see :func:`needles`); bit ``i`` of a candidate's mask is ``needles[i]``
    needles: list[bytes]

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        """Return the candidate lines of ``block[lo:hi]`` (``lo`` at a line start), sorted and
        unique, as ``(start, end, mask)``: byte offsets into ``block`` (end excludes ``\\n``) and
        the bit mask of the needles the line holds (ASCII case folded)."""
        ...


class Haystacks:
    """Which of many short texts hold a literal, answered with C-level finds in one joined text
    (a Python test of every text, literal by literal, costs more than a small log's analysis)."""

    def __init__(self, texts: Sequence[bytes]) -> None:
        self._texts = list(texts)
        self._joined = b"\0".join(self._texts)
        self._starts: list[int] = []
        at = 0
        for text in self._texts:
            self._starts.append(at)
            at += len(text) + 1

    def holding(self, lit: bytes, first: int = 0) -> list[int]:
        """The indices of the texts from ``first`` on that hold ``lit`` (``lit in text``), ascending."""
        out: list[int] = []
        if first >= len(self._texts):
            return out
        if not lit:
            return list(range(first, len(self._texts)))
        find, starts, texts, last = self._joined.find, self._starts, self._texts, len(self._texts) - 1
        at = find(lit, starts[first])
        while at != -1:
            j = bisect_right(starts, at) - 1
            if at + len(lit) <= starts[j] + len(texts[j]):  # inside texts[j], not across a separator
                out.append(j)
            # texts[j] is answered: it holds lit, or every later start in it runs across its end too
            if j == last:
                break
            at = find(lit, starts[j + 1])
        return out


def needles(triggers: Sequence[str]) -> list[bytes]:
    """The literals to search: lower-cased UTF-8, without blanks, duplicates, and literals that
    contain another one (a line holding the longer one holds the shorter one too); shortest
    first, in an order that does not change from run to run (a mask's bits name them, and a
    compiled database is cached under them)."""
    lits = sorted({t.lower().encode("utf-8") for t in triggers if t}, key=lambda lit: (len(lit), lit))
    # each kept literal is searched for in all the longer ones at once (see Haystacks), not
    # tested against each of them in Python (hundreds squared)
    hay = Haystacks(lits)
    held = bytearray(len(lits))  # 1: holds a kept literal (only longer ones, later in the list, can)
    kept: list[bytes] = []
    for i, lit in enumerate(lits):
        if held[i]:
            continue
        kept.append(lit)
        for j in hay.holding(lit, i + 1):
            held[j] = 1
    return kept


#: how JSON encoders write the characters a needle may hold that they escape: Go's
#: ``encoding/json`` (docker's json-file driver, Kubernetes) also escapes these, as ``\u00XX``
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_forms(lits: Sequence[bytes]) -> list[tuple[bytes, int]]:
    """The other forms in which a JSON string holds the needles ``lits`` (lower-cased UTF-8),
    as ``(form, index of its needle)``, in a stable order.

    A form is what an encoder writes for the needle: ``"``, ``\\`` and control characters
    escaped as JSON's grammar requires (short escapes like ``\\"`` and ``\\t``, ``\\u00XX``
    for the others), as Python's ``json`` and Go's ``encoding/json`` both write them; Go's form
    also escapes ``<``, ``>`` and ``&``; Python's default form escapes every character beyond
    ASCII (``\\u30e1``). Only forms that differ from their needle are listed. With them, the
    bytes of a record (``{"log":"  File \\"/x.py\\", line 1 ..."}``) hold every needle its
    message holds, as long as it has no escape of another kind (see
    :func:`oomdoctor.reader.only_cut_by_normalise`)."""
    out: list[tuple[bytes, int]] = []
    for i, lit in enumerate(lits):
        text = lit.decode("utf-8", "surrogatepass")
        plain = json.dumps(text, ensure_ascii=False)[1:-1]
        go = "".join(_GO_ESCAPES.get(ch, ch) for ch in plain)
        python = json.dumps(text)[1:-1]
        seen = {lit}
        for form in (plain, go, python):
            data = form.encode("utf-8", "surrogatepass")
            if data not in seen:
                seen.add(data)
                out.append((data, i))
    return out


def with_json_forms(lits: Sequence[bytes]) -> list[tuple[bytes, int]]:
    """What to search for ``lits``: each literal with its index, then the JSON forms of them
    (:func:`json_forms`), each with the index of its literal."""
    return [*((lit, i) for i, lit in enumerate(lits)), *json_forms(lits)]
