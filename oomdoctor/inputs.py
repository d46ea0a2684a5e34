"""Open log sources: files (compressed or not, detected by magic bytes) and stdin."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

BLOCK = 1 << 20


class InputError(Exception):
    """A source cannot be read; the message is one line naming the source."""


def _magic(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


def _open(path: str) -> BinaryIO:
    p = Path(path)
    try:
        if p.is_dir():
            raise InputError(f"{path}: is a directory")
        raw: BinaryIO = open(p, "rb")  # noqa: SIM115
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open: {exc.strerror or exc}") from None
    head = raw.read(6)
    raw.seek(0)
    kind = _magic(head)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw, "rb")  # type: ignore[return-value]
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise InputError(f"{path}: zstd-compressed; install 'zstandard' to read it") from None
        return zstandard.ZstdDecompressor().stream_reader(raw)
    return raw


def read_blocks(path: str, block: int = BLOCK) -> Iterator[bytes]:
    """Yield the decompressed bytes of ``path`` (``-`` is stdin) in blocks.

    A truncated or corrupt compressed file raises :class:`InputError` after yielding what was
    readable, so the caller can still report the partial result.
    """
    if path == "-":
        fd = 0
        while True:
            data = os.read(fd, block)
            if not data:
                return
            yield data
    f = _open(path)
    try:
        while True:
            try:
                data = f.read(block)
            except EOFError:
                raise InputError(f"{path}: truncated compressed file (read what was there)") from None
            except (OSError, zlib.error, lzma.LZMAError) as exc:
                raise InputError(f"{path}: corrupt compressed data ({exc})") from None
            if not data:
                return
            yield data
    finally:
        f.close()
