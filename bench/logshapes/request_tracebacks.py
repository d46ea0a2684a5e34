"""vLLM serving where some requests end in a logged traceback that is not a failure.

``vllm serve`` 0.9 without request logging: per request ``Added request`` and the uvicorn access
line, a throughput line every ten seconds, and for about one request in fifty a client that went
away: uvicorn's ``Exception in ASGI application`` with the whole traceback (eleven frames through
uvicorn, starlette and vLLM's API server) ending in ``asyncio.exceptions.CancelledError``. Every
frame line is something the scanner looks for (a traceback may lead to a failure), so candidates
are on one line in ten or so, none of them a failure. Each failure is the serving log's
EngineCore traceback ending in ``torch.OutOfMemoryError``, then a restart.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, vllm_ts
from logshapes.vllm_serving import failure, startup, stats_line

SITE = "/usr/local/lib/python3.12/dist-packages"

FRAMES = (
    ("uvicorn/protocols/http/httptools_impl.py", 409, "run_asgi",
     "result = await app(  # type: ignore[func-returns-value]"),
    ("uvicorn/middleware/proxy_headers.py", 60, "__call__", "return await self.app(scope, receive, send)"),
    ("fastapi/applications.py", 1054, "__call__", "await super().__call__(scope, receive, send)"),
    ("starlette/applications.py", 113, "__call__", "await self.middleware_stack(scope, receive, send)"),
    ("starlette/middleware/errors.py", 187, "__call__", "raise exc"),
    ("starlette/middleware/cors.py", 85, "__call__", "await self.app(scope, receive, send)"),
    ("starlette/routing.py", 715, "__call__", "await self.middleware_stack(scope, receive, send)"),
    ("starlette/routing.py", 288, "handle", "await self.app(scope, receive, send)"),
    ("vllm/entrypoints/openai/api_server.py", 702, "create_chat_completion",
     "generator = await handler.create_chat_completion(request, raw_request)"),
    ("vllm/entrypoints/openai/serving_chat.py", 281, "create_chat_completion",
     "async for res in result_generator:"),
    ("vllm/v1/engine/async_llm.py", 311, "generate", "out = q.get_nowait() or await q.get()"),
)


def cancelled() -> list[str]:
    out = ["ERROR:    Exception in ASGI application", "Traceback (most recent call last):"]
    for path, line, func, code in FRAMES:
        out.append(f'  File "{SITE}/{path}", line {line}, in {func}')
        out.append(f"    {code}")
    out.append("asyncio.exceptions.CancelledError")
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    """About ``target`` bytes of requests from second ``sec``; about one in fifty is cancelled."""
    lines: list[str] = []
    size = 0
    next_stats = sec + 10
    while size < target:
        for _ in range(rng.randint(1, 6)):
            t = vllm_ts(sec)
            rid = f"chatcmpl-{rng.getrandbits(128):032x}"
            new = [f"INFO {t} [async_llm.py:270] Added request {rid}."]
            if rng.random() < 0.02:
                new += [f"INFO {t} [async_llm.py:431] Aborted request {rid}.", *cancelled()]
            else:
                new.append(
                    f'INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 65000)} - '
                    f'"POST /v1/chat/completions HTTP/1.1" 200 OK'
                )
            lines.extend(new)
            size += sum(len(x) + 1 for x in new)
        sec += 1
        if sec >= next_stats:
            next_stats = sec + 10
            lines.append(stats_line(rng, sec))
    return ("\n".join(lines) + "\n").encode(), sec


SHAPE = Shape(
    name="request-tracebacks",
    about="vLLM serving, a traceback for one request in fifty",
    head=lambda rng, sec: startup(rng, sec, 1000),
    traffic=traffic,
    failure=failure,
    expect="torch.cuda-oom",
)
