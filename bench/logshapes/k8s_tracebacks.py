"""vLLM serving with request tracebacks (the ``request-tracebacks`` shape) as docker's json-file
driver stores it.

The third JSON shape: every traceback frame is a record whose message holds escaped quotes
(``File \\"/usr/.../starlette/routing.py\\", line 715``). A frame is phase evidence, set aside
where no failure is near; a reader that trusts no JSON record's bytes (unescaping might change
what it holds) reads each frame where it stands instead, or when it looks back for the latest
progress line.
"""

from __future__ import annotations

from logshapes import request_tracebacks
from logshapes.k8s_json import wrapped

SHAPE = wrapped(request_tracebacks.SHAPE, "k8s-tracebacks", "docker/K8s json-file wrapped vLLM, a traceback for one request in fifty")
