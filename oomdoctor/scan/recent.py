"""The lines read last, kept for the windows of the failures still to be matched.

Lines are kept in the order they were read, which is most often their order in the log: a
deferred line read late, or the lines above a trigger put in before it, may break it. The
structure counts where it is broken (a line whose number is below the one before it), so that
while it is not, a window is found from the end in a few steps instead of a walk over all
``maxlen`` lines: what a warning printed over and over would otherwise pay at each occurrence.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from oomdoctor.reader import Line

#: the text the kept lines may hold in all (characters): lines up to ``reader.MAX_LINE_BYTES`` long
#: would otherwise make ``maxlen`` of them hold hundreds of MiB
MAX_CHARS = 8 << 20
#: lines kept whatever their length (a failure's window of long lines stays whole)
MIN_LINES = 16


class RecentLines:
    """The last ``maxlen`` lines read, oldest first, and whether their numbers ascend. Beyond
    ``max_chars`` of text, the oldest lines leave early (but the last :data:`MIN_LINES` stay)."""

    def __init__(self, lines: Iterable[Line] = (), maxlen: int = 256, max_chars: int = MAX_CHARS) -> None:
        self._lines: deque[Line] = deque(maxlen=maxlen)
        #: how many lines have a number below the line's before them
        self._descents = 0
        #: the characters of text the kept lines hold
        self._chars = 0
        self._max_chars = max_chars
        for line in lines:
            self.append(line)

    def __iter__(self) -> Iterator[Line]:
        return iter(self._lines)

    def __len__(self) -> int:
        return len(self._lines)

    def __bool__(self) -> bool:
        return bool(self._lines)

    def last(self) -> Line:
        """The line read last."""
        return self._lines[-1]

    def append(self, line: Line) -> None:
        """Keep ``line`` (the oldest line leaves when ``maxlen`` are kept, or the oldest lines
        while the text kept is over ``max_chars``)."""
        lines = self._lines
        if lines and len(lines) == lines.maxlen:
            self._drop_oldest()
        if lines and line.number < lines[-1].number:
            self._descents += 1
        lines.append(line)
        self._chars += len(line.text)
        while self._chars > self._max_chars and len(lines) > MIN_LINES:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        lines = self._lines
        if len(lines) > 1 and lines[1].number < lines[0].number:
            self._descents -= 1
        self._chars -= len(lines.popleft().text)

    def pop(self) -> Line:
        """Take back the line read last."""
        lines = self._lines
        line = lines.pop()
        self._chars -= len(line.text)
        if lines and line.number < lines[-1].number:
            self._descents -= 1
        return line

    def from_number(self, number: int) -> Iterable[Line]:
        """The lines in reading order, but for a leading run of lines numbered below ``number``
        (that run may be left out, or not: a caller skips such lines anyway)."""
        if self._descents:
            return self._lines
        tail: list[Line] = []
        for line in reversed(self._lines):
            if line.number < number:
                break
            tail.append(line)
        tail.reverse()
        return tail

    def numbered(self, low: int, high: int) -> Iterator[Line]:
        """The lines numbered ``low`` to ``high`` (both included), in reading order."""
        return (line for line in self.from_number(low) if low <= line.number <= high)
