"""The wall-clock time a log line states, to order lines of a log printed newest first.

Log consoles that export newest first (RunPod's, and copies of cloud log viewers) put the lines
after a failure in the file that happened before it. Only the time a line states tells; this reads
the first ``[YYYY-]MM-DD HH:MM:SS`` of its prefix or the start of its text (vLLM's
``INFO 02-03 03:43:49``, Python logging's ``2024-02-03 03:43:49,976``). The year is dropped: vLLM's
own format has none.
"""

from __future__ import annotations

import re

from oomdoctor.reader import Line

_TIME = re.compile(r"(?<!\d)(?:\d{4}[-/])?(\d{2})[-/](\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?!\d)")
#: how far into a line's text its time may stand (a logger's fields before it)
_HEAD = 80


def line_time(line: Line) -> tuple[int, ...] | None:
    """(month, day, hour, minute, second) the line states, or None."""
    m = _TIME.search(line.prefix) or _TIME.search(line.text[:_HEAD])
    return tuple(int(g) for g in m.groups()) if m else None


#: a progress line below a failure counts as before it when it states a time up to this many seconds
#: earlier: within an hour, so that two clocks of a chronological log in different time zones (a
#: logger in local time, another in UTC: whole hours apart) do not read as an export newest first
EARLIER_WITHIN = 3600


def seconds(t: tuple[int, ...]) -> int:
    """A stated (month, day, hour, minute, second) as seconds, months counted as 31 days."""
    month, day, hour, minute, second = t
    return (((month * 31 + day) * 24 + hour) * 60 + minute) * 60 + second
