"""vLLM under a high request rate (the ``vllm-stats`` shape) as docker's json-file driver stores it.

The second JSON shape: the stats line every other line, each a record whose only escape is the
``\\n`` ending its message, between the uvicorn access records (``\\"POST ...\\"``: escaped
quotes). A reader that reads every record where it is, because unwrapping it might change what it
holds, pays for each stats line; one that sees a record only cuts when its escapes end strings
sets them aside like a plain log's.
"""

from __future__ import annotations

from logshapes import vllm_stats
from logshapes.k8s_json import wrapped

SHAPE = wrapped(vllm_stats.SHAPE, "k8s-stats", "docker/K8s json-file wrapped vLLM, stats every other line")
