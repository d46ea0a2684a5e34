"""ollama serving with ``OLLAMA_DEBUG=1``: the scheduler's debug lines name the model's path.

``ollama serve`` 0.5-0.6 with debug logging, as a bug report asks for it: per request the GIN access
line and the scheduler's and runner's debug lines (``source=sched.go``, ``source=server.go``), most of
them with the model's blob path under ``/root/.ollama/models``: ollama's name is on most lines, and
only tells the engine. Each failure is a model reload whose offload was planned on more free memory
than there is: llama.cpp's ``cudaMalloc failed: out of memory`` for the weights, and ollama's
``error loading llama server``; then the next load fits.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, clock, fill

BLOB = "/root/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa"


def _ts(sec: float) -> str:
    h, m, s, frac = clock(sec)
    return f"2025-01-10T{h:02d}:{m:02d}:{s:02d}.{int(frac * 1000):03d}+01:00"


def _gin(sec: int) -> str:
    h, m, s, _ = clock(sec)
    return f"[GIN] 2025/01/10 - {h:02d}:{m:02d}:{s:02d}"


def startup(rng: Random, sec: int) -> list[str]:
    t = _ts(sec)
    return [
        f'time={t} level=INFO source=routes.go:1259 msg="server config" env="map[CUDA_VISIBLE_DEVICES: '
        "OLLAMA_DEBUG:true OLLAMA_FLASH_ATTENTION:false OLLAMA_HOST:http://0.0.0.0:11434 OLLAMA_KEEP_ALIVE:5m0s "
        'OLLAMA_MAX_LOADED_MODELS:0 OLLAMA_MODELS:/root/.ollama/models OLLAMA_NUM_PARALLEL:0]"',
        f'time={t} level=INFO source=routes.go:1339 msg="Listening on [::]:11434 (version 0.5.7)"',
        f'time={t} level=INFO source=types.go:131 msg="inference compute" id=GPU-5f3e0a1b library=cuda variant=v12 '
        'compute=8.6 driver=12.4 name="NVIDIA GeForce RTX 3060" total="11.8 GiB" available="11.6 GiB"',
    ]


def _load(rng: Random, sec: int, fits: bool) -> list[str]:
    t = _ts(sec)
    return [
        f'time={t} level=INFO source=memory.go:356 msg="offload to cuda" layers.requested=-1 layers.model=33 '
        'layers.offload=33 layers.split="" memory.available="[5.8 GiB]" memory.gpu_overhead="0 B" '
        'memory.required.full="5.6 GiB" memory.required.partial="5.6 GiB" memory.required.kv="256.0 MiB"',
        f'time={t} level=INFO source=server.go:376 msg="starting llama server" cmd="/usr/local/bin/ollama runner '
        f'--model {BLOB} --ctx-size 8192 --batch-size 512 --n-gpu-layers 33 --threads 8 --parallel 4 --port 41235"',
        "load_tensors: loading model tensors, this can take a while... (mmap = true)",
    ] + ([
        "load_tensors:        CUDA0 model buffer size =  4155.99 MiB",
        f'time={_ts(sec + 2)} level=INFO source=server.go:594 msg="llama runner started in 2.01 seconds"',
    ] if fits else [])


def _second(rng: Random, sec: int) -> list[str]:
    out: list[str] = []
    for i in range(rng.randint(2, 6)):
        t = _ts(sec + i / 10)
        took = rng.uniform(0.3, 12.0)
        out += [
            f'time={t} level=DEBUG source=sched.go:575 msg="evaluating already loaded" model={BLOB}',
            f'time={t} level=DEBUG source=server.go:966 msg="new runner detected, loading model for cgo tokenization"'
            if rng.random() < 0.02 else
            f'time={t} level=DEBUG source=routes.go:1542 msg="chat request" images=0 prompt="<|user|>'
            f'{rng.randint(10, 9999)}"',
            f'time={t} level=DEBUG source=sched.go:407 msg="context for request finished"',
            f'time={t} level=DEBUG source=sched.go:339 msg="runner with non-zero duration has gone idle, adding timer" '
            f'modelPath={BLOB} duration=5m0s',
            f"{_gin(sec)} | 200 | {took:11.6f}s |       127.0.0.1 | POST     \"/api/chat\"",
        ]
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    return fill(rng, sec, target, _second)


def failure(rng: Random, k: int) -> list[str]:
    sec = 3600 * (k + 1)
    size = (4155.99, 4357.12, 3980.5, 4711.02)[k]
    return [
        *_load(rng, sec, fits=False),
        f"ggml_backend_cuda_buffer_type_alloc_buffer: allocating {size:.2f} MiB on device 0: cudaMalloc failed: out of memory",
        f"alloc_tensor_range: failed to allocate CUDA0 buffer of size {int(size * 1048576)}",
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
        f'time={_ts(sec + 2)} level=ERROR source=sched.go:455 msg="error loading llama server" error="llama runner '
        'process has terminated: error loading model: unable to allocate CUDA0 buffer"',
        f"{_gin(sec + 2)} | 500 |  2.301234567s |       127.0.0.1 | POST     \"/api/chat\"",
        *_load(rng, sec + 30, fits=True),
    ]


SHAPE = Shape(
    name="ollama-debug",
    about="ollama serving with OLLAMA_DEBUG=1, the model's path on most lines",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="ggml.alloc-failed",
)
