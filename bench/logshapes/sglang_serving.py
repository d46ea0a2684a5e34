"""SGLang serving under load: a ``Decode batch`` line every other line, between access lines.

``python -m sglang.launch_server`` 0.4: the scheduler logs a ``Prefill batch`` line per prefill and
a ``Decode batch`` line every ``decode_log_interval`` (40) decode steps, each with the running
requests and token usage; under load they are most of the log, between uvicorn's access lines. The
``Decode batch`` line holds a run fact (``#running-req:``: the requests running when it failed), so
it is what vLLM's throughput line is to ``vllm-stats``, but a context line that reads a fact, not
phase evidence. Each failure is the scheduler's traceback ending in SGLang's decode
``RuntimeError: Decode out of memory`` (the pool's tokens on their own lines, 0.4.4-0.4.6), then
a restart.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, clock

SITE = "/usr/local/lib/python3.10/dist-packages"


def _ts(sec: int, tp: bool = True) -> str:
    h, m, s, _ = clock(sec)
    return f"[2025-06-01 {h:02d}:{m:02d}:{s:02d}{' TP0' if tp else ''}]"


def startup(rng: Random, sec: int) -> list[str]:
    t, u = _ts(sec), _ts(sec, tp=False)
    return [
        f"{u} server_args=ServerArgs(model_path='Qwen/Qwen2.5-14B-Instruct', tokenizer_path='Qwen/Qwen2.5-14B-Instruct', "
        "mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=8192, tp_size=1, "
        "cuda_graph_max_bs=160, disable_cuda_graph=False, context_length=None, page_size=1)",
        f"{t} Load weight begin. avail mem=78.68 GB",
        f"{t} Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=50.95 GB, mem usage=27.73 GB.",
        f"{t} KV Cache is allocated. #tokens: {rng.choice((198432, 201216))}, K size: 18.17 GB, V size: 18.17 GB",
        f"{t} Memory pool end. avail mem=12.34 GB",
        f"{t} Capture cuda graph begin. This can take up to several minutes. avail mem=12.34 GB",
        f"{t} Capture cuda graph end. Time elapsed: 21.87 s. mem usage=1.62 GB. avail mem=10.72 GB.",
        f"{t} max_total_num_tokens=198432, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=32768, available_gpu_mem=10.72 GB",
        f"{u} INFO:     Started server process [3817]",
        f"{u} INFO:     Application startup complete.",
    ]


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    """About ``target`` bytes from second ``sec``: per request an access line; a decode line after
    each, now and then a prefill line."""
    lines: list[str] = []
    size = 0
    running = 40
    while size < target:
        t, u = _ts(sec), _ts(sec, tp=False)
        for _ in range(rng.randint(8, 16)):
            running = max(1, min(160, running + rng.randint(-3, 3)))
            new = [f'{u} INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 65000)} - '
                   f'"POST /v1/chat/completions HTTP/1.1" 200 OK']
            if rng.random() < 0.1:
                new.append(f"{t} Prefill batch. #new-seq: 1, #new-token: {rng.randint(20, 4000)}, #cached-token: "
                           f"{rng.randint(0, 2000)}, token usage: 0.{rng.randint(10, 97):02d}, #running-req: {running}, "
                           f"#queue-req: {rng.randint(0, 30)}")
            new.append(f"{t} Decode batch. #running-req: {running}, #token: {rng.randint(20000, 198000)}, "
                       f"token usage: 0.{rng.randint(10, 97):02d}, gen throughput (token/s): {rng.uniform(800, 4200):.2f}, "
                       f"#queue-req: {rng.randint(0, 30)}")
            lines.extend(new)
            size += sum(len(x) + 1 for x in new)
        sec += 1
    return ("\n".join(lines) + "\n").encode(), sec


def failure(rng: Random, k: int) -> list[str]:
    t = _ts(3600 * (k + 1))
    tokens = (148, 96, 212, 64)[k]
    frames = [
        ("sglang/srt/managers/scheduler.py", 2311, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
        ("sglang/srt/managers/scheduler.py", 661, "event_loop_overlap", "batch = self.get_next_batch_to_run()"),
        ("sglang/srt/managers/scheduler.py", 1262, "get_next_batch_to_run", "self.running_batch = self.update_running_batch(self.running_batch)"),
        ("sglang/srt/managers/scheduler.py", 1528, "update_running_batch", "batch.prepare_for_decode()"),
        ("sglang/srt/managers/schedule_batch.py", 1315, "prepare_for_decode", "self.out_cache_loc = self.alloc_token_slots(bs)"),
        ("sglang/srt/managers/schedule_batch.py", 876, "alloc_token_slots", "raise RuntimeError("),
    ]
    out = [f"{t} Scheduler hit an exception: Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out += [f'  File "{SITE}/{path}", line {line}, in {func}', f"    {code}"]
    out += [
        "RuntimeError: Decode out of memory. Try to lower your batch size.",
        f"Try to allocate {tokens} tokens.",
        f"Avaliable tokens: {rng.randint(0, tokens - 1)}",
        f"self.token_to_kv_pool_allocator.available_size()={rng.randint(0, tokens - 1)}",
        "self.tree_cache.evictable_size()=0",
        "",
        f"{_ts(3600 * (k + 1), tp=False)} Received sigquit from a child process. It usually means the child failed.",
    ]
    return out + startup(rng, 3600 * (k + 1) + 30)


SHAPE = Shape(
    name="sglang-serving",
    about="SGLang serving, a Decode batch line every other line",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="sglang.oom",
)
