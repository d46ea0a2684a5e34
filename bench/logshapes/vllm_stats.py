"""vLLM under a high request rate: the periodic stats line every other line, short access lines.

``vllm serve`` 0.10.2 (process prefixes ``(APIServer pid=N)`` / ``(EngineCore_DP0 pid=N)``) without
request logging: what is left is the uvicorn access line of each request and the engine's
``Engine 000: Avg prompt throughput ...`` line, here every second line (the worst case for a reader
that treats every stats line as phase evidence). Each failure is the EngineCore's fatal error with
its traceback ending in ``torch.OutOfMemoryError`` (decoding), the API server's ``EngineDeadError``,
then a restart.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, fill, vllm_ts

API = 31
ENGINE = 245


def startup(rng: Random, sec: int, api: int = API, engine: int = ENGINE) -> list[str]:
    t = vllm_ts(sec)
    a = f"(APIServer pid={api}) INFO {t}"
    e = f"(EngineCore_DP0 pid={engine}) INFO {vllm_ts(sec + 9)}"
    return [
        f"INFO {t} [__init__.py:216] Automatically detected platform cuda.",
        f"{a} [api_server.py:1896] vLLM API server version 0.10.2",
        f"{a} [utils.py:328] non-default args: {{'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', "
        f"'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 16384, 'gpu_memory_utilization': 0.95, "
        f"'max_num_seqs': 512}}",
        f"{a} [model.py:547] Resolved architecture: LlamaForCausalLM",
        f"{a} [model.py:1510] Using max model len 16384",
        f"{a} [scheduler.py:205] Chunked prefill is enabled with max_num_batched_tokens=8192.",
        f"{e} [core.py:654] Waiting for init message from front-end.",
        f"{e} [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='meta-llama/Llama-3.1-8B-Instruct', "
        f"speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=16384, "
        f"download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, "
        f"quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name=meta-llama/Llama-3.1-8B-Instruct, enable_prefix_caching=True",
        f"{e} [gpu_model_runner.py:2338] Starting to load model meta-llama/Llama-3.1-8B-Instruct...",
        f"(EngineCore_DP0 pid={engine}) Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.12it/s]",
        f"{e} [default_loader.py:268] Loading weights took 3.61 seconds",
        f"{e} [gpu_model_runner.py:2392] Model loading took 14.9889 GiB and 4.312779 seconds",
        f"{e} [gpu_worker.py:298] Available KV cache memory: 57.48 GiB",
        f"{e} [kv_cache_utils.py:1028] GPU KV cache size: 470,880 tokens",
        f"{e} [kv_cache_utils.py:1032] Maximum concurrency for 16,384 tokens per request: 28.74x",
        f"{e} [gpu_model_runner.py:3118] Graph capturing finished in 12 secs, took 0.52 GiB",
        f"{e} [core.py:218] init engine (profile, create kv cache, warmup model) took 31.05 seconds",
        f"(APIServer pid={api}) INFO {vllm_ts(sec + 40)} [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"(APIServer pid={api}) INFO:     Started server process [{api}]",
        f"(APIServer pid={api}) INFO:     Waiting for application startup.",
        f"(APIServer pid={api}) INFO:     Application startup complete.",
    ]


def step(rng: Random, sec: int) -> list[str]:
    """One second: a few requests, each access line followed by a stats line."""
    t = vllm_ts(sec)
    out: list[str] = []
    for _ in range(rng.randint(2, 8)):
        out.append(
            f"(APIServer pid={API}) INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 65000)} "
            f'- "POST /v1/completions HTTP/1.1" 200 OK'
        )
        out.append(
            f"(APIServer pid={API}) INFO {t} [loggers.py:123] Engine 000: Avg prompt throughput: "
            f"{rng.uniform(200, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(50, 900):.1f} tokens/s, "
            f"Running: {rng.randint(1, 512)} reqs, Waiting: {rng.randint(0, 90)} reqs, GPU KV cache usage: "
            f"{rng.uniform(0, 99):.1f}%, Prefix cache hit rate: {rng.uniform(0, 80):.1f}%"
        )
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    return fill(rng, sec, target, step)


def failure(rng: Random, k: int) -> list[str]:
    sec = 50000 + 100 * k
    t = vllm_ts(sec)
    e = f"(EngineCore_DP0 pid={ENGINE + 1000 * k}) ERROR {t} [core.py:718]"
    site = "/usr/local/lib/python3.12/dist-packages"
    frames = [
        ("vllm/v1/engine/core.py", 709, "run_engine_core", "engine_core.run_busy_loop()"),
        ("vllm/v1/engine/core.py", 736, "run_busy_loop", "self._process_engine_step()"),
        ("vllm/v1/engine/core.py", 761, "_process_engine_step", "outputs, model_executed = self.step_fn()"),
        ("vllm/v1/engine/core.py", 288, "step", "model_output = self.execute_model_with_error_logging("),
        ("vllm/v1/engine/core.py", 274, "execute_model_with_error_logging", "raise err"),
        ("vllm/v1/executor/abstract.py", 87, "execute_model", "output = self.collective_rpc(\"execute_model\","),
        ("vllm/utils/__init__.py", 3060, "run_method", "return func(*args, **kwargs)"),
        ("vllm/v1/worker/gpu_worker.py", 436, "execute_model", "output = self.model_runner.execute_model(scheduler_output,"),
        ("vllm/v1/worker/gpu_model_runner.py", 2064, "execute_model", "model_output = self.model("),
        ("vllm/model_executor/models/llama.py", 581, "forward", "model_output = self.model(input_ids, positions,"),
        ("vllm/model_executor/layers/activation.py", 85, "forward_cuda", "out = torch.empty(output_shape, dtype=x.dtype, device=x.device)"),
    ]
    tried = [448.00, 896.00, 1.75, 3.50][k]
    unit = "MiB" if k < 2 else "GiB"
    free = [301.44, 122.06, 1.02, 705.56][k]
    free_unit = "MiB" if k != 2 else "GiB"
    out = [f"{e} EngineCore encountered a fatal error.", f"{e} Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out.append(f'{e}   File "{site}/{path}", line {line}, in {func}')
        out.append(f"{e}     {code}")
    out.append(
        f"{e} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2f} {unit}. GPU 0 has a total "
        f"capacity of 79.19 GiB of which {free:.2f} {free_unit} is free. Including non-PyTorch memory, this process "
        f"has 78.62 GiB memory in use. Of the allocated memory 75.31 GiB is allocated by PyTorch, with 520.00 MiB "
        f"allocated in private pools (e.g., CUDA Graphs), and 1.22 GiB is reserved by PyTorch but unallocated. If "
        f"reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
        f"avoid fragmentation.  See documentation for Memory Management  "
        f"(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    a = f"(APIServer pid={API}) ERROR {vllm_ts(sec + 1)}"
    out += [
        f"{a} [async_llm.py:485] AsyncLLM output_handler failed.",
        f"{a} [async_llm.py:485] Traceback (most recent call last):",
        f'{a} [async_llm.py:485]   File "{site}/vllm/v1/engine/async_llm.py", line 444, in output_handler',
        f"{a} [async_llm.py:485]     outputs = await engine_core.get_output_async()",
        f'{a} [async_llm.py:485]   File "{site}/vllm/v1/engine/core_client.py", line 845, in get_output_async',
        f"{a} [async_llm.py:485]     raise self._format_exception(outputs) from None",
        f"{a} [async_llm.py:485] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
        f"See stack trace (above) for the root cause.",
        f"(APIServer pid={API}) INFO:     Shutting down",
        f"(APIServer pid={API}) INFO:     Finished server process [{API}]",
    ]
    return out + startup(rng, sec + 30, API, ENGINE + 1000 * (k + 1))


SHAPE = Shape(
    name="vllm-stats",
    about="vLLM, stats line every other line",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="torch.cuda-oom",
)
