"""Node mode: follow every file matching a glob (``/var/log/containers/*.log``), each its own
stream, into a :class:`~oomdoctor.fleet.streams.StreamTable` (and so to the same sinks as the
server): for a DaemonSet where no log shipper runs.

Files are looked for again at every poll (new ones are read from their start); each is followed
by name as ``tail -F`` does: a file replaced at its path (rotation) is read to its end, then the
new one from its start; one that shrinks (truncation) is read again from 0; one that is gone is
dropped once read to its end. A line in the CRI format of the kubelet (``TIME stdout|stderr F|P
message``, partial ``P`` pieces joined) or docker's json-file format (``{"log": ...}``) gives its
message; any other line is taken as it is. A Kubernetes container log's name
(``POD_NAMESPACE_CONTAINER-ID.log``) gives the stream's pod and container; the node is the one
the follower is told (``NODE_NAME`` on Kubernetes, else the host name).
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import BinaryIO

from oomdoctor.fleet.records import StreamId
from oomdoctor.fleet.streams import StreamTable

#: the most read from one file at a poll (the others get their turn)
READ_SIZE = 1 << 20
#: a partial (CRI ``P``) line is cut at this length
MAX_PARTIAL = 64 << 10

_CRI = re.compile(rb"^\S+ (?:stdout|stderr) ([PF])(?:\S*) ?(.*)$")
_K8S_NAME = re.compile(r"^(?P<pod>[^_]+)_(?P<namespace>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$")


def stream_of(path: str, node: str) -> StreamId:
    """The stream of a followed file: node, and pod and container from a Kubernetes log name."""
    parts = {"node": node, "file": path}
    m = _K8S_NAME.match(os.path.basename(path))
    if m:
        parts["pod"] = m["pod"]
        parts["container"] = m["container"]
    return StreamId.of(parts)


@dataclass
class _Lines:
    """Complete lines → messages (CRI partial pieces joined)."""

    partial: bytearray = field(default_factory=bytearray)

    def message(self, line: bytes) -> bytes | None:
        m = _CRI.match(line)
        if m:
            if m[1] == b"P":
                if len(self.partial) < MAX_PARTIAL:
                    self.partial += m[2][: MAX_PARTIAL - len(self.partial)]
                return None
            msg = bytes(self.partial) + m[2]
            self.partial.clear()
            return msg
        if line.startswith(b'{"log":'):
            try:
                rec = json.loads(line)
            except ValueError:
                return line
            log = rec.get("log") if isinstance(rec, dict) else None
            if isinstance(log, str):
                return log.rstrip("\n").encode("utf-8", "surrogatepass")
        return line


@dataclass
class _Tail:
    path: str
    sid: StreamId
    fh: BinaryIO | None = None
    ident: tuple[int, int] | None = None
    rest: bytes = b""  # an unfinished line
    lines: _Lines = field(default_factory=_Lines)
    gone: bool = False


class GlobFollower:
    """Follow the files matching ``pattern`` into ``table`` (:meth:`poll` a few times a second)."""

    def __init__(self, pattern: str, table: StreamTable, node: str) -> None:
        self.pattern = pattern
        self.table = table
        self.node = node
        self.tails: dict[str, _Tail] = {}

    def close(self) -> None:
        for t in self.tails.values():
            if t.fh is not None:
                t.fh.close()
        self.tails.clear()

    def poll(self) -> int:
        """Look for new files, read what each has new; returns the bytes read."""
        for path in sorted(glob.glob(self.pattern)):
            if path not in self.tails and os.path.isfile(path):
                self.tails[path] = _Tail(path, stream_of(path, self.node))
        n = 0
        for path, t in list(self.tails.items()):
            n += self._read(t)
            if t.gone and t.fh is None:
                del self.tails[path]
        return n

    def _open(self, t: _Tail) -> bool:
        try:
            fh = open(t.path, "rb", buffering=0)  # noqa: SIM115 (kept open while followed)
        except OSError:
            t.gone = True
            return False
        st = os.fstat(fh.fileno())
        t.fh, t.ident, t.gone = fh, (st.st_dev, st.st_ino), False
        return True

    def _read(self, t: _Tail) -> int:
        if t.fh is None and not self._open(t):
            return 0
        assert t.fh is not None
        data = t.fh.read(READ_SIZE)
        if data:
            self._feed(t, data)
            return len(data)
        try:
            st = os.stat(t.path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != t.ident:  # rotated or removed: the old one is drained
            t.fh.close()
            t.fh = None
            t.gone = st is None
            return 0
        if st.st_size < t.fh.tell():  # truncated
            t.fh.seek(0)
            t.rest = b""
        return 0

    def _feed(self, t: _Tail, data: bytes) -> None:
        data = t.rest + data
        end = data.rfind(b"\n")
        if end < 0:
            t.rest = data[-MAX_PARTIAL:]
            return
        t.rest = data[end + 1:][-MAX_PARTIAL:]
        out = []
        for line in data[:end].split(b"\n"):
            msg = t.lines.message(line.rstrip(b"\r"))
            if msg is not None:
                out.append(msg)
        if out:
            self.table.ingest([(t.sid, b"\n".join(out) + b"\n")])
