"""Text Generation Inference serving: the router's line per request, its module on every line.

``text-generation-launcher`` 1.x-2.x, its output saved by ``docker logs`` (no colours): the launcher's
start-up, then the router's INFO line per request (``generate{parameters=GenerateParameters { ... }
total_time=... }: text_generation_router::server: router/src/server.rs:289: Success``). Every line
names ``text_generation_router`` (or the launcher), which only tells the engine: in this shape it is
on almost every line. Each failure is the router's ERROR line quoting the shard's CUDA out-of-memory
error during a prefill ("Server error: CUDA out of memory. Tried to allocate ..."), then a restart.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, clock, fill


def _ts(sec: float) -> str:
    h, m, s, frac = clock(sec)
    return f"2023-12-22T{h:02d}:{m:02d}:{s:02d}.{int(frac * 1e6):06d}Z"


def startup(rng: Random, sec: int) -> list[str]:
    t = _ts(sec)
    return [
        f'{t}  INFO text_generation_launcher: Args {{ model_id: "mistralai/Mistral-7B-Instruct-v0.2", revision: None, '
        "validation_workers: 2, sharded: None, num_shard: None, quantize: None, dtype: None, trust_remote_code: false, "
        "max_concurrent_requests: 128, max_best_of: 2, max_stop_sequences: 4, max_top_n_tokens: 5, max_input_length: 1024, "
        "max_total_tokens: 2048, waiting_served_ratio: 1.2, max_batch_prefill_tokens: 4096, max_batch_total_tokens: None, "
        'max_waiting_tokens: 20, hostname: "0.0.0.0", port: 80, shard_uds_path: "/tmp/text-generation-server", '
        "cuda_memory_fraction: 1.0 }",
        f"{t}  INFO download: text_generation_launcher: Starting download process.",
        f"{t}  INFO download: text_generation_launcher: Successfully downloaded weights.",
        f"{t}  INFO shard-manager: text_generation_launcher: Starting shard rank=0",
        f"{t}  INFO shard-manager: text_generation_launcher: Shard ready in 9.53218142s rank=0",
        f"{t}  INFO text_generation_launcher: Starting Webserver",
        f"{t}  INFO text_generation_router: router/src/main.rs:178: Warming up model",
        f"{t}  INFO text_generation_router: router/src/main.rs:211: Setting max batch total tokens to 145152",
        f"{t}  INFO text_generation_router: router/src/main.rs:212: Connected",
    ]


def _request(rng: Random, sec: float) -> str:
    new = rng.choice((40, 128, 256, 512))
    total = rng.uniform(0.2, 9.0)
    queue = rng.uniform(0.00001, 0.05)
    per_token = total / new
    return (
        f"{_ts(sec)}  INFO compat_generate{{default_return_full_text=true}}:generate{{parameters=GenerateParameters "
        f"{{ best_of: None, temperature: Some({rng.choice((0.1, 0.7, 1.0))}), repetition_penalty: None, top_k: None, "
        f"top_p: Some(0.95), typical_p: None, do_sample: true, max_new_tokens: Some({new}), return_full_text: "
        "Some(false), stop: [], truncate: None, watermark: false, details: false, decoder_input_details: false, "
        f'seed: None, top_n_tokens: None }} total_time="{total:.9f}s" validation_time="{queue / 10:.6f}ms" '
        f'queue_time="{queue * 1e3:.6f}ms" inference_time="{total - queue:.9f}s" time_per_token="{per_token * 1e3:.6f}ms" '
        'seed="Some(9284716220735421961)"}: text_generation_router::server: router/src/server.rs:289: Success'
    )


def _second(rng: Random, sec: int) -> list[str]:
    return [_request(rng, sec + i / 20) for i in range(rng.randint(4, 12))]


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    return fill(rng, sec, target, _second)


def failure(rng: Random, k: int) -> list[str]:
    sec = 3600 * (k + 1)
    asked = (222.0, 1.5, 96.0, 640.0)[k]
    free = (217.94, 1.12, 88.5, 402.3)[k]
    return [
        f"{_ts(sec)} ERROR batch{{batch_size=1}}:prefill:prefill{{id={rng.randint(1, 9999)} size=1}}:prefill{{id=1 size=1}}: "
        f"text_generation_client: router/client/src/lib.rs:33: Server error: CUDA out of memory. Tried to allocate "
        f"{asked:.2f} {'GiB' if asked < 10 else 'MiB'}. GPU 0 has a total capacty of 39.39 GiB of which {free:.2f} MiB is "
        "free. Process 862944 has 39.17 GiB memory in use. Of the allocated memory 37.10 GiB is allocated by PyTorch, "
        "and 1.57 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        f"{_ts(sec + 1)} ERROR text_generation_launcher: Shard 0 crashed",
        f"{_ts(sec + 1)} ERROR text_generation_launcher: Shutting down shards",
        *startup(rng, sec + 30),
    ]


SHAPE = Shape(
    name="tgi-serving",
    about="TGI serving, the router's line per request",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="tgi.oom",
)
