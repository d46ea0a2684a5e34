"""llama.cpp's ``llama-server`` under load, with its slot and timing lines.

What ``llama-server -m model.gguf -ngl 99 -c 32768 -np 4`` (a b5xxx build) writes: model loading and
buffer sizes, then per request the slot lifecycle (``launch_slot_``, prompt processing progress,
``print_timing`` with the three timing lines, ``release``) and the HTTP log line. The failures
alternate between a runtime ``CUDA error: out of memory`` in the CUDA memory pool (an abort) and a
restart with a larger context that cannot allocate the KV cache (``cudaMalloc failed: out of
memory`` and the buffer / context errors that follow it); each is followed by a start-up.
"""

from __future__ import annotations

from random import Random

from logshapes import Shape, fill


def startup(rng: Random, sec: int, ctx: int = 32768) -> list[str]:
    kv = ctx // 8
    return [
        "ggml_cuda_init: GGML_CUDA_FORCE_MMQ:    no",
        "ggml_cuda_init: GGML_CUDA_FORCE_CUBLAS: no",
        "ggml_cuda_init: found 1 CUDA devices:",
        "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes",
        "build: 5415 (3d1a9b2c) with cc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0 for x86_64-linux-gnu",
        "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32",
        "main: binding port with default address family",
        "main: HTTP server is listening, hostname: 0.0.0.0, port: 8080, http threads: 31",
        "main: loading model",
        "srv    load_model: loading model '/models/Qwen2.5-14B-Instruct-Q4_K_M.gguf'",
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) - 23612 MiB free",
        "llama_model_loader: loaded meta data with 38 key-value pairs and 579 tensors from /models/Qwen2.5-14B-Instruct-Q4_K_M.gguf (version GGUF V3 (latest))",
        "print_info: file type   = Q4_K - Medium",
        "print_info: file size   = 8.37 GiB (4.87 BPW) ",
        "load_tensors: offloading 48 repeating layers to GPU",
        "load_tensors: offloaded 49/49 layers to GPU",
        "load_tensors:        CUDA0 model buffer size =  8148.38 MiB",
        "load_tensors:   CPU_Mapped model buffer size =   417.66 MiB",
        "llama_context: constructing llama_context",
        f"llama_context: n_ctx         = {ctx}",
        "llama_context: n_batch       = 2048",
        "llama_context: n_ubatch      = 512",
        "llama_context: flash_attn    = 1",
        "llama_context:  CUDA_Host  output buffer size =     2.32 MiB",
        f"llama_kv_cache_unified:      CUDA0 KV buffer size =  {kv * 0.75:.2f} MiB",
        f"llama_kv_cache_unified: KV self size  = {kv * 0.75:.2f} MiB, K (f16): {kv * 0.375:.2f} MiB, V (f16): {kv * 0.375:.2f} MiB",
        "llama_context:      CUDA0 compute buffer size =   307.00 MiB",
        "llama_context:  CUDA_Host compute buffer size =    74.01 MiB",
        "common_init_from_params: warming up the model with an empty run - please wait ... (--no-warmup to disable)",
        "srv          init: initializing slots, n_slots = 4",
        f"slot         init: id  0 | task -1 | new slot n_ctx_slot = {ctx // 4}",
        f"slot         init: id  1 | task -1 | new slot n_ctx_slot = {ctx // 4}",
        f"slot         init: id  2 | task -1 | new slot n_ctx_slot = {ctx // 4}",
        f"slot         init: id  3 | task -1 | new slot n_ctx_slot = {ctx // 4}",
        "main: model loaded",
        "main: chat template, chat_template: chatml, example_format: '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n<|im_start|>user\\nHello<|im_end|>\\n<|im_start|>assistant\\nHi there<|im_end|>\\n<|im_start|>user\\nHow are you?<|im_end|>\\n<|im_start|>assistant\\n'",
        "main: server is listening on http://0.0.0.0:8080 - starting the main loop",
        "srv  update_slots: all slots are idle",
    ]


def request(rng: Random, sec: int) -> list[str]:
    """One request on a free slot, start to finish."""
    task = sec  # the clock counts requests here
    slot = rng.randrange(4)
    s = f"id  {slot} | task {task}"
    n_prompt = rng.randint(40, 3000)
    n_gen = rng.randint(16, 1024)
    pp_ms = n_prompt * rng.uniform(0.18, 0.35)
    tg_ms = n_gen * rng.uniform(14.0, 19.0)
    out = [
        "srv  params_from_: Chat format: Content-only",
        f"slot launch_slot_: {s} | processing task",
        f"slot update_slots: {s} | new prompt, n_ctx_slot = 8192, n_keep = 0, n_prompt_tokens = {n_prompt}",
        f"slot update_slots: {s} | kv cache rm [0, end)",
        f"slot update_slots: {s} | prompt processing progress, n_past = {n_prompt}, n_tokens = {n_prompt}, progress = 1.000000",
        f"slot update_slots: {s} | prompt done, n_past = {n_prompt}, n_tokens = {n_prompt}",
        f"slot      release: {s} | stop processing: n_past = {n_prompt + n_gen - 1}, truncated = 0",
        f"slot print_timing: {s} | ",
        f"prompt eval time = {pp_ms:10.2f} ms / {n_prompt:5d} tokens ({pp_ms / n_prompt:8.2f} ms per token, "
        f"{1000 * n_prompt / pp_ms:8.2f} tokens per second)",
        f"       eval time = {tg_ms:10.2f} ms / {n_gen:5d} tokens ({tg_ms / n_gen:8.2f} ms per token, "
        f"{1000 * n_gen / tg_ms:8.2f} tokens per second)",
        f"      total time = {pp_ms + tg_ms:10.2f} ms / {n_prompt + n_gen:5d} tokens",
        f"srv  log_server_r: request: POST /v1/chat/completions 10.0.{rng.randint(0, 9)}.{rng.randint(2, 250)} 200",
    ]
    if rng.random() < 0.2:
        out.append("srv  update_slots: all slots are idle")
    return out


def traffic(rng: Random, sec: int, target: int) -> tuple[bytes, int]:
    return fill(rng, sec, target, request)


def failure(rng: Random, k: int) -> list[str]:
    if k % 2 == 0:  # at run time: the pool cannot grow
        return [
            "slot update_slots: id  2 | task 99999 | prompt processing progress, n_past = 2048, n_tokens = 2048, progress = 0.250000",
            "CUDA error: out of memory",
            "  current device: 0, in function ggml_cuda_pool_legacy::alloc at /app/ggml/src/ggml-cuda/ggml-cuda.cu:389",
            "  cudaMalloc((void **) &ptr, look_ahead_size)",
            "/app/ggml/src/ggml-cuda/ggml-cuda.cu:75: CUDA error",
            "/app/build/bin/libggml-base.so(+0x16a6b)[0x7f3c1c3e2a6b]",
            "/app/build/bin/libggml-base.so(ggml_abort+0x15f)[0x7f3c1c3e2e4f]",
            *startup(rng, 0),
        ]
    ctx = 131072
    need = 24576.00 if k == 1 else 12288.00
    return [  # restarted with a larger context: the KV cache does not fit
        *startup(rng, 0, ctx)[:24],
        f"ggml_backend_cuda_buffer_type_alloc_buffer: allocating {need:.2f} MiB on device 0: cudaMalloc failed: out of memory",
        f"alloc_tensor_range: failed to allocate CUDA0 buffer of size {int(need * 2**20)}",
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
        "common_init_from_params: failed to create context with model '/models/Qwen2.5-14B-Instruct-Q4_K_M.gguf'",
        "srv    load_model: failed to load model, '/models/Qwen2.5-14B-Instruct-Q4_K_M.gguf'",
        "srv   operator(): operator(): cleaning up before exit...",
        "main: exiting due to model loading error",
        *startup(rng, 0),
    ]


SHAPE = Shape(
    name="llamacpp-server",
    about="llama.cpp server, slot and timing lines",
    head=startup,
    traffic=traffic,
    failure=failure,
    expect="ggml.alloc-failed",
)
