"""vLLM serving (the ``vllm-serving`` shape) as ``kubectl logs``/docker's json-file driver stores it.

Every line becomes one JSON record ``{"log":"...\\n","stream":"stderr","time":"..."}``, encoded as
Go's ``encoding/json`` does (``<``, ``>`` and ``&`` escaped as ``\\u003c``...): what a user copies
from ``/var/lib/docker/containers/*/*-json.log`` or a log collector. The failures are the serving
shape's, wrapped the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from logshapes import Shape, vllm_serving

_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"))


class _Clock:
    """Record times: 9.3 ms apart, in nanoseconds as docker writes them."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> str:
        self.ns += 9_300_217
        s, ns = divmod(self.ns, 1_000_000_000)
        m, s = divmod(s, 60)
        h, m = divmod(m, 60)
        return f"2024-08-19T{h % 24:02d}:{m:02d}:{s:02d}.{ns:09d}Z"


def json_file() -> Callable[[bytes], bytes]:
    """A wrapper with its own clock: each line of the data as a json-file record (uvicorn's
    ``INFO:`` lines on stdout, vLLM's logger on stderr)."""
    clock = _Clock()

    def wrap(data: bytes) -> bytes:
        out = []
        for line in data.decode().splitlines():
            stream = "stdout" if line.startswith("INFO:") else "stderr"
            rec = json.dumps({"log": line + "\n", "stream": stream, "time": clock()}, ensure_ascii=False,
                             separators=(",", ":"))
            for ch, esc in _GO_ESCAPES:
                rec = rec.replace(ch, esc)
            out.append(rec)
        return ("\n".join(out) + "\n").encode()

    return wrap


def wrapped(shape: Shape, name: str, about: str) -> Shape:
    """``shape`` as docker's json-file driver stores it: the same lines and failures, each a record."""
    return replace(shape, name=name, about=about, wrap=json_file)


SHAPE = wrapped(vllm_serving.SHAPE, "k8s-json", "docker/K8s json-file wrapped vLLM")
