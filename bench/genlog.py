"""Generate a realistic, deterministic vLLM serving log of a given size (fast: repeated blocks).

The log is what a long-running ``vllm serve`` with request logging writes: a startup banner,
then request lines (``Received request ...`` with the prompt and sampling parameters, ``Added
request``, the uvicorn access line) and a throughput line every ten seconds of traffic. A few
CUDA out-of-memory crashes (an EngineCore traceback ending in ``torch.OutOfMemoryError``) are
spread through the file, each followed by a restart banner.

    python bench/genlog.py --size 1GiB            # -> bench/out/vllm-serving-1GiB.log
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
#: bump when the content changes so that cached logs are regenerated
GENERATOR_VERSION = 3
SEGMENTS = 12
SEGMENT_BYTES = 1 << 20
OOM_BLOCKS = 4

_TEXT = (
    "the of and to in is you that it for was on are as with his they be at one have this from or "
    "had by word but what some we can out other were all there when up use your how said an each "
    "she which do their time if will way about many then them write would like so these her long "
    "make thing see him two has look more day could go come did number sound no most people my over "
    "know water than call first who may down side been now find any new work part take get place "
    "made live where after back little only round man year came show every good me give our under "
    "name very through just form sentence great think say help low line differ turn cause much mean "
    "before move right boy old too same tell does set three want air well also play small end put "
    "home read hand port large spell add even land here must big high such follow act why ask men "
    "change went light kind off need house picture try us again animal point mother world near build "
    "self earth father head stand own page should country found answer school grow study still learn "
    "plant cover food sun four between state keep eye never last let thought city tree cross farm "
    "hard start might story saw far sea draw left late run don't while press close night real life "
    "few north memory kernel cache token model batch summary translate explain python function error "
    "gradient tensor matrix vector request response latency throughput server client queue"
)
_WORDS = _TEXT.split()


def _ts(sec: int) -> str:
    m, s = divmod(sec, 60)
    h, m = divmod(m, 60)
    return f"08-19 {h % 24:02d}:{m:02d}:{s:02d}"


def startup(rng: random.Random, sec: int, pid: int) -> list[str]:
    t = _ts(sec)
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
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {_ts(sec + 25)} [default_loader.py:272] Loading weights took 21.48 seconds",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {_ts(sec + 25)} [gpu_model_runner.py:1801] Model loading took 30.7097 GiB and 22.113071 seconds",
        f"(VllmWorker rank=1 pid={pid + 2}) INFO {_ts(sec + 25)} [gpu_model_runner.py:1801] Model loading took 30.7097 GiB and 22.201193 seconds",
        f"INFO {_ts(sec + 40)} [kv_cache_utils.py:716] GPU KV cache size: 284,832 tokens",
        f"INFO {_ts(sec + 40)} [kv_cache_utils.py:720] Maximum concurrency for 32,768 tokens per request: 8.69x",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {_ts(sec + 41)} [gpu_worker.py:232] Available KV cache memory: 34.76 GiB",
        "Capturing CUDA graph shapes: 100%|██████████| 67/67 [00:31<00:00,  2.13it/s]",
        f"(VllmWorker rank=0 pid={pid + 1}) INFO {_ts(sec + 73)} [gpu_model_runner.py:2326] Graph capturing finished in 32 secs, took 1.61 GiB",
        f"INFO {_ts(sec + 73)} [core.py:172] init engine (profile, create kv cache, warmup model) took 48.56 seconds",
        f"INFO {_ts(sec + 74)} [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000",
        f"INFO:     Started server process [{pid}]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ]


def oom_block(rng: random.Random, sec: int, pid: int, k: int) -> list[str]:
    t = _ts(sec)
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


def _prompt(rng: random.Random) -> str:
    n = rng.choice((12, 30, 60, 120, 250))
    return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."


def traffic(rng: random.Random, sec: int, target: int) -> tuple[bytes, int]:
    """About ``target`` bytes of request traffic starting at second ``sec``."""
    lines: list[str] = []
    size = 0
    next_stats = sec + 10
    while size < target:
        for _ in range(rng.randint(1, 6)):
            rid = f"chatcmpl-{rng.getrandbits(128):032x}"
            t = _ts(sec)
            temp = rng.choice((0.0, 0.2, 0.7, 1.0))
            mx = rng.choice((128, 256, 512, 1024, 2048))
            new = [
                f"INFO {t} [logger.py:43] Received request {rid}: prompt: '<|im_start|>system\\nYou are a "
                f"helpful assistant.<|im_end|>\\n<|im_start|>user\\n{_prompt(rng)}<|im_end|>\\n<|im_start|>"
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
                f"WARNING {_ts(sec)} [protocol.py:58] The following fields were present in the request "
                f"but ignored: {{'max_completion_tokens'}}"
            )
        sec += 1
        if sec >= next_stats:
            next_stats = sec + 10
            lines.append(
                f"INFO {_ts(sec)} [loggers.py:118] Engine 000: Avg prompt throughput: "
                f"{rng.uniform(200, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(50, 900):.1f} "
                f"tokens/s, Running: {rng.randint(1, 60)} reqs, Waiting: {rng.randint(0, 9)} reqs, GPU KV cache "
                f"usage: {rng.uniform(0, 95):.1f}%, Prefix cache hit rate: {rng.uniform(0, 80):.1f}%"
            )
    return ("\n".join(lines) + "\n").encode(), sec


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1GiB, 200MiB)")
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit])


def size_label(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{unit}"
    return f"{n}B"


def generate(size: int, path: Path | None = None) -> Path:
    """Write the log (reusing an existing one of the same size and generator version)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = path or OUT / f"vllm-serving-{size_label(size)}.log"
    stamp = path.with_suffix(".stamp")
    want = f"{GENERATOR_VERSION} {size}"
    if path.exists() and stamp.exists() and stamp.read_text() == want:
        return path
    rng = random.Random(20240819)
    sec = 0
    segments = []
    for _ in range(SEGMENTS):
        seg, sec = traffic(rng, sec, SEGMENT_BYTES)
        segments.append(seg)
    # OOM crashes at fixed fractions of the file, each followed by a restart
    marks = [int(size * (i + 1) / (OOM_BLOCKS + 1)) for i in range(OOM_BLOCKS)]
    written = 0
    i = 0
    with open(path, "wb") as f:
        head = ("\n".join(startup(rng, 0, 1000)) + "\n").encode()
        f.write(head)
        written += len(head)
        k = 0
        while written < size:
            if k < len(marks) and written >= marks[k]:
                pid = 2000 + 100 * k
                block = oom_block(rng, 40000 + k, pid + 7, k) + startup(rng, 40010 + k, pid + 50)
                data = ("\n".join(block) + "\n").encode()
                k += 1
            else:
                data = segments[i % SEGMENTS]
                i += 1
                if written + len(data) > size:  # end on a whole line
                    cut = data.rfind(b"\n", 0, size - written)
                    data = data[: cut + 1] if cut >= 0 else b""
                    if not data:
                        break
            f.write(data)
            written += len(data)
    stamp.write_text(want)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("1GiB"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    print(generate(args.size, args.out))


if __name__ == "__main__":
    main()
