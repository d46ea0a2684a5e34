"""Open log sources: files (compressed or not, detected by magic bytes) and stdin.

Every failure is an :class:`InputError` whose message is one line naming the source. Sources
need not be seekable (``oomdoctor <(kubectl logs ...)``, FIFOs, ``/dev/stdin``): the magic bytes
are read once and put back in front of the stream.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import stat
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from oomdoctor.i18n import _

if TYPE_CHECKING:
    from oomdoctor.prefilter.pool import Precomputed

BLOCK = 1 << 20


class InputError(Exception):
    """A source cannot be read; the message is one line naming the source.

    ``partial`` is True when some data was read (and yielded) before the failure, so the caller
    can still report what was there.
    """

    def __init__(self, message: str, *, partial: bool = False) -> None:
        super().__init__(message)
        self.partial = partial


def bom_encoding(head: bytes) -> str | None:
    """``"utf-16"`` or ``"utf-32"`` when ``head`` starts with that byte-order mark (PowerShell 5
    writes ``> log.txt`` as UTF-16), else None (UTF-8's mark is dropped line by line)."""
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # before UTF-16: FF FE 00 00
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return None


def _magic(head: bytes) -> str | None:
    encoding = bom_encoding(head)
    if encoding is not None:
        return encoding
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


class _Transcoded(io.RawIOBase):
    """Text in ``encoding`` (its byte-order mark says the byte order) as UTF-8 bytes, decoded
    incrementally; an invalid code unit becomes U+FFFD, as undecodable UTF-8 does."""

    def __init__(self, raw: BinaryIO, encoding: str) -> None:
        self._raw = raw
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._out = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._out and not self._done:
            data = self._raw.read(BLOCK)
            self._done = not data
            self._out = self._decoder.decode(data or b"", self._done).encode("utf-8")
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Prefixed(io.RawIOBase):
    """A raw stream that returns ``head`` first, then the rest of ``raw`` (no seek needed)."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._head = memoryview(head)
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._raw.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def _os_message(path: str, exc: OSError, verb: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return _("{path}: no such file").format(path=path)
    if isinstance(exc, PermissionError):
        return _("{path}: permission denied").format(path=path)
    if isinstance(exc, IsADirectoryError):
        return _("{path}: is a directory").format(path=path)
    reason = exc.strerror or exc
    if verb == "open":
        return _("{path}: cannot open: {reason}").format(path=path, reason=reason)
    return _("{path}: cannot read: {reason}").format(path=path, reason=reason)


def _open(path: str) -> tuple[BinaryIO, str | None]:
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(_("{path}: is a directory").format(path=path))
        raw: BinaryIO = open(path, "rb", buffering=0)  # noqa: SIM115
    except OSError as exc:
        raise InputError(_os_message(path, exc, "open")) from None
    try:
        head = raw.read(6) or b""
    except OSError as exc:
        raw.close()
        raise InputError(_os_message(path, exc, "read")) from None
    kind = _magic(head)
    if kind is None and raw.seekable():
        # a plain file: read it straight (one copy per block, no Python-level buffering layer)
        try:
            raw.seek(0)
        except OSError:
            pass
        else:
            return raw, None
    stream: BinaryIO = io.BufferedReader(_Prefixed(head, raw), BLOCK)
    if kind in ("utf-16", "utf-32"):
        return io.BufferedReader(_Transcoded(stream, kind), BLOCK), kind
    # the decompressors are imported for a compressed input only (about 3 ms of a plain log's run)
    if kind == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=stream, mode="rb"), kind  # type: ignore[return-value]
    if kind == "bzip2":
        import bz2

        return bz2.BZ2File(stream, "rb"), kind  # type: ignore[return-value]
    if kind == "xz":
        import lzma

        return lzma.LZMAFile(stream, "rb"), kind  # type: ignore[return-value]
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            stream.close()
            raise InputError(_("{path}: zstd-compressed; install 'zstandard' to read it").format(path=path)) from None
        return zstandard.ZstdDecompressor().stream_reader(stream), kind
    return stream, None


def rereader(path: str) -> Callable[[int, int], bytes] | None:
    """How to read a plain file's bytes again, ``read(a, b)`` (what :func:`read_blocks` yields
    from ``a`` to ``b``), or None for stdin, a compressed or transcoded file, or anything but a
    regular file. Each call opens the file anew; an error reading it raises ``OSError``."""
    if path == "-":
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb", buffering=0) as f:
            if _magic(f.read(6) or b"") is not None:
                return None
    except OSError:
        return None

    def read(a: int, b: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(a)
            return f.read(b - a)  # (buffered: all of it, unless the file ends first)

    return read


def _worker_chunks(path: str, f: io.FileIO, ahead: Precomputed) -> Generator[bytes, None, None] | None:
    """The chunks of a big plain file whose candidate lines worker processes find; None when
    the file gets no workers (see :mod:`oomdoctor.prefilter.pool`)."""
    from oomdoctor.prefilter.pool import parallel_blocks, workers_for

    try:
        size = os.fstat(f.fileno()).st_size
        workers = workers_for(ahead.inner, size)
    except OSError as exc:
        raise InputError(_os_message(path, exc, "read")) from None
    except ValueError as exc:  # OOMDOCTOR_WORKERS is not a number
        raise InputError(str(exc)) from None
    return parallel_blocks(path, f.fileno(), size, ahead, workers) if workers else None


def _regular_size(f: Any) -> int | None:
    """The size of ``f`` when it is a regular file, else None."""
    try:
        st = os.fstat(f.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def read_blocks(
    path: str, block: int = BLOCK, ahead: Precomputed | None = None, warn: Callable[[str], None] | None = None
) -> Iterator[bytes]:
    """Yield the decompressed bytes of ``path`` (``-`` is stdin) in blocks.

    A truncated or corrupt compressed file raises :class:`InputError` (``partial=True`` when
    something was read) after yielding what was readable, so the caller can still report it.
    With ``ahead``, a big plain file is read in chunks whose candidate lines worker processes
    found (see :mod:`oomdoctor.prefilter.pool`); each chunk is told to ``ahead`` first.
    ``warn`` is told (one line) when a plain file ends short of the size it had when opened: it
    was truncated while being read (``copytruncate`` rotation), and the report covers what was read.
    """
    if path == "-":
        while True:
            try:
                data = os.read(0, block)
            except OSError as exc:
                raise InputError(_os_message("<stdin>", exc, "read")) from None
            if not data:
                return
            yield data
    f, kind = _open(path)
    done = 0
    chunks: Generator[bytes, None, None] | None = None
    size_at_open = _regular_size(f) if kind is None else None
    try:
        if ahead is not None and kind is None and isinstance(f, io.FileIO):
            chunks = _worker_chunks(path, f, ahead)
        while True:
            try:
                if chunks is not None:
                    data = next(chunks, b"")
                else:
                    # read1: whatever the decompressor has, so a truncated file yields all it can
                    data = f.read1(block) if kind is not None and hasattr(f, "read1") else f.read(block)
            except EOFError:
                raise InputError(
                    _("{path}: truncated {kind} file: the report covers the {done} bytes read before the end").format(
                        path=path, kind=kind, done=done),
                    partial=done > 0,
                ) from None
            except Exception as exc:  # zlib/lzma/bz2/zstd each raise their own error types
                if kind is None and not isinstance(exc, OSError):
                    raise
                if kind is None and isinstance(exc, OSError):
                    raise InputError(_os_message(path, exc, "read"), partial=done > 0) from None
                detail = " ".join(str(exc).split()) or type(exc).__name__
                raise InputError(
                    _("{path}: corrupt {kind} data after {done} bytes ({detail}); the report covers what was read").format(
                        path=path, kind=kind, done=done, detail=detail),
                    partial=done > 0,
                ) from None
            if not data:
                now = _regular_size(f) if size_at_open is not None and warn is not None else None
                if warn is not None and now is not None and size_at_open is not None and now < size_at_open:
                    warn(_("{path} shrank from {size} to {now} bytes while being read (truncated or rotated?); "
                           "the report covers what was read").format(path=path, size=size_at_open, now=now))
                return
            done += len(data)
            yield data
    finally:
        if chunks is not None:  # stops the workers
            chunks.close()
        with contextlib.suppress(Exception):  # closing a corrupt stream may fail again
            f.close()
