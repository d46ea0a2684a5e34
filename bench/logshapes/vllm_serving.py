"""vLLM serving with request logging (the log of issue 6's benchmark; keep it byte-identical).

What a long-running ``vllm serve`` (0.9, V1 engine, request logging on) writes: a start-up banner,
then per request ``Received request ...`` with the prompt and sampling parameters, ``Added
request`` and the uvicorn access line, and a throughput line every ten seconds of traffic. Each
failure is an EngineCore traceback ending in ``torch.OutOfMemoryError`` (sampling), then a restart.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, prompt, vllm_ts


def startup(rng: Random, sec: int, pid: int) -> list[str]:
    t = vllm_ts(sec)
    return [
        f"INFO {t} [__init__.py:244] Automatically detected platform cuda.",
        f"INFO {t} [api_server.py:1395] vLLM API server version 0.9.2",
        f"INFO {t} [cli_args.py:325] non-default args: {{'model': 'Qwen/Qwen2.5-32B-Instruct', "
        f"'max_model_len': 32768, 'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.92, "
        f"'max_num_seqs': 256, 'enable_prefix_caching': True}}",
        f"INFO {t} [config.py:841] This model supports multiple tasks: {{'generate', 'reward', 'embed'}}. Defaulting to 'generate'.",
        f"INFO {t} [config.py:2226] Chunked prefill is enabled with max_num_batched_tokens=8192.",
        f"INFO {t} [core.py:526] Waiting for init message from front-end.",
        f"INFO {t} [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: model='Qwen/Qwen2.5-32B-Instruct', "
        f"speculative_config=None, tokenizer='Qwen/Qwen2.5-32B-Instruct', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, "
        f"download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=2, pipeline_parallel_size=1, "
        f"disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, "
        f"device_config=cuda, seed=0, served_model_name=Qwen/Qwen2.5-32B-Instruct, enable_prefix_caching=True",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {t} [gpu_model_runner.py:1770] Starting to load model Qwen/Qwen2.5-32B-Instruct...",
        f"(VllmWorker rank=1 pid={pid + 2}) INFO {t} [gpu_model_runner.py:1770] Starting to load model Qwen/Qwen2.5-32B-Instruct...",
        "Loading safetensors checkpoint shards:   0% Completed | 0/17 [00:00<?, ?it/s]",
        "Loading safetensors checkpoint shards: 100% Completed | 17/17 [00:21<00:00,  1.27s/it]",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {vllm_ts(sec + 25)} [default_loader.py:272] Loading weights took 21.48 seconds",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {vllm_ts(sec + 25)} [gpu_model_runner.py:1801] Model loading took 30.7097 GiB and 22.113071 seconds",
        f"(VllmWorker rank=1 pid={pid + 2}) INFO {vllm_ts(sec + 25)} [gpu_model_runner.py:1801] Model loading took 30.7097 GiB and 22.201193 seconds",
        f"INFO {vllm_ts(sec + 40)} [kv_cache_utils.py:716] GPU KV cache size: 284,832 tokens",
        f"INFO {vllm_ts(sec + 40)} [kv_cache_utils.py:720] Maximum concurrency for 32,768 tokens per request: 8.69x",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {vllm_ts(sec + 41)} [gpu_worker.py:232] Available KV cache memory: 34.76 GiB",
        "Capturing CUDA graph shapes: 100%|██████████| 67/67 [00:31<00:00,  2.13it/s]",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {vllm_ts(sec + 73)} [gpu_model_runner.py:2326] Graph capturing finished in 32 secs, took 1.61 GiB",
        f"INFO {vllm_ts(sec + 73)} [core.py:172] init engine (profile, create kv cache, warmup model) took 48.56 seconds",
        f"INFO {vllm_ts(sec + 74)} [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"INFO:     Started server process [{pid}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ]


def oom_block(rng: Random, sec: int, pid: int, k: int) -> list[str]:
    t = vllm_ts(sec)
    p = f"(EngineCore_0 pid={pid}) "
    site = "/usr/local/lib/python3.12/dist-packages"
    frames = [
        ("vllm/v1/engine/core.py", 701, "run_engine_core"),
        ("vllm/v1/engine/core.py", 728, "run_busy_loop"),
        ("vllm/v1/engine/core.py", 754, "_process_engine_step"),
        ("vllm/v1/engine/core.py", 279, "step"),
        ("vllm/v1/executor/multiproc_executor.py", 185, "execute_model"),
        ("vllm/v1/worker/gpu_worker.py", 338, "execute_model"),
        ("vllm/v1/worker/gpu_model_runner.py", 1483, "execute_model"),
        ("vllm/v1/sample/sampler.py", 52, "forward"),
        ("vllm/v1/sample/ops/topk_topp_sampler.py", 104, "forward_native"),
    ]
    tried = [1.18, 2.37, 4.75, 9.49][k % 4]
    free = [312.81, 150.06, 600.12, 88.44][k % 4]
    out = [f"{p}ERROR {t} [core.py:586] EngineCore encountered a fatal error."]
    out.append(f"{p}ERROR {t} [core.py:586] Traceback (most recent call last):")
    for path, line, func in frames:
        out.append(f'{p}ERROR {t} [core.py:586]   File "{site}/{path}", line {line}, in {func}')
        out.append(f"{p}ERROR {t} [core.py:586]     return self.{func}(*args, **kwargs)")
    out.append(
        f"{p}ERROR {t} [core.py:586] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{tried:.2f} GiB. GPU 0 has a total capacity of 79.19 GiB of which {free:.2f} MiB is free. "
        f"Process {pid} has 78.87 GiB memory in use. Of the allocated memory 74.20 GiB is allocated by "
        f"PyTorch, with 1.61 GiB allocated in private pools (e.g., CUDA Graphs), and 1.90 GiB is reserved "
        f"by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        f"Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    out.append(f"ERROR {t} [async_llm.py:420] AsyncLLM output_handler failed.")
    out.append("INFO:     Shutting down")
    out.append(f"INFO:     Finished server process [{pid - 10}]")
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    """About ``target`` bytes of request traffic starting at second ``sec``."""
    lines: list[str] = []
    size = 0
    next_stats = sec + 10
    while size < target:
        for _ in range(rng.randint(1, 6)):
            rid = f"chatcmpl-{rng.getrandbits(128):032x}"
            t = vllm_ts(sec)
            temp = rng.choice((0.0, 0.2, 0.7, 1.0))
            mx = rng.choice((128, 256, 512, 1024, 2048))
            new = [
                f"INFO {t} [logger.py:43] Received request {rid}: prompt: '<|im_start|>system\\nYou are a "
                f"helpful assistant.<|im_end|>\\n<|im_start|>user\\n{prompt(rng)}<|im_end|>\\n<|im_start|>"
                f"assistant\\n', params: SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
                f"repetition_penalty=1.05, temperature={temp}, top_p=0.8, top_k=20, min_p=0.0, seed=None, "
                f"stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos=False, "
                f"max_tokens={mx}, min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
                f"spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None, "
                f"extra_args=None), prompt_token_ids: None, prompt_embeds shape: None, lora_request: None.",
                f"INFO {t} [async_llm.py:270] Added request {rid}.",
                f'INFO:     10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)}:{rng.randint(30000, 65000)} - '
                f'"POST /v1/chat/completions HTTP/1.1" 200 OK',
            ]
            lines.extend(new)
            size += sum(len(x) + 1 for x in new)
        if rng.random() < 0.01:
            lines.append(
                f"WARNING {vllm_ts(sec)} [protocol.py:58] The following fields were present in the request "
                f"but ignored: {{'max_completion_tokens'}}"
            )
        sec += 1
        if sec >= next_stats:
            next_stats = sec + 10
            lines.append(stats_line(rng, sec))
    return ("\n".join(lines) + "\n").encode(), sec


def stats_line(rng: Random, sec: int) -> str:
    """The engine's throughput line, printed every ten seconds of traffic."""
    return (
        f"INFO {vllm_ts(sec)} [loggers.py:118] Engine 000: Avg prompt throughput: "
        f"{rng.uniform(200, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(50, 900):.1f} "
        f"tokens/s, Running: {rng.randint(1, 60)} reqs, Waiting: {rng.randint(0, 9)} reqs, GPU KV cache "
        f"usage: {rng.uniform(0, 95):.1f}%, Prefix cache hit rate: {rng.uniform(0, 80):.1f}%"
    )


def failure(rng: Random, k: int) -> list[str]:
    pid = 2000 + 100 * k
    return oom_block(rng, 40000 + k, pid + 7, k) + startup(rng, 40010 + k, pid + 50)


SHAPE = Shape(
    name="vllm-serving",
    about="vLLM serving, request logging",
    head=lambda rng, sec: startup(rng, sec, 1000),
    traffic=traffic,
    failure=failure,
    expect="torch.cuda-oom",
)
