"""The first remedy is the one aimed at what the log says ran out: a stated CUDA-graph estimate beats a
blind utilization raise, and so on. Each case is a real log's lines (the corpus id in the docstring)."""

from __future__ import annotations

import re

import oomdoctor
from oomdoctor.context import parse_argv
from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids

_GRAPHS_118 = (
    "(Worker_DP1_TP1_EP3 pid=3585771) INFO 08-19 05:56:57 [gpu_model_runner.py:6936] Estimated CUDA graph memory: "
    "118.65 GiB total\n"
    "(EngineCore_DP0 pid=3584999) ERROR 08-19 05:56:57 [core.py:1346] ValueError: No available memory for the cache "
    "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
)


def test_a_cuda_graph_estimate_larger_than_the_raise_leads() -> None:
    """new-008: 118.65 GiB of estimated graphs; +0.05 of the GPU cannot give that back."""
    f = only_error(diagnose_text(_GRAPHS_118))
    assert f.cause is not None and f.cause.id == "cudagraph-capture"
    ids = remedy_ids(f)
    assert ids[0] == "vllm.cudagraph-estimate-off"
    assert f.remedies[0].env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    assert f.remedies[0].saves_bytes == 127399467418  # 118.65 GiB
    raise_ = remedy(f, "vllm.gpu-memory-utilization.raise")
    assert raise_.confidence == "low"
    assert "118.65 GiB for CUDA graphs, more than this raise gives back" in raise_.why
    assert ids.index("vllm.cudagraph-estimate-off") < ids.index("vllm.gpu-memory-utilization.raise")


def test_a_small_estimate_on_a_known_gpu_leaves_the_raise_first() -> None:
    """0.36 GiB of graphs on an H100: +0.05 of 79.22 GiB (3.96 GiB) covers it, so vLLM's own advice stays."""
    log = (
        "INFO 08-14 14:07:22 [gpu_model_runner.py:6806] Estimated CUDA graph memory: 0.36 GiB total\n"
        + _GRAPHS_118.splitlines(keepends=True)[1]
    )
    f = only_error(oomdoctor.diagnose(log.encode(), hints={"gpu": "H100"}, source="<test>"))
    raise_ = remedy(f, "vllm.gpu-memory-utilization.raise")
    assert (raise_.confidence, raise_.flags) == ("medium", {"--gpu-memory-utilization": "0.95"})
    assert "more than this raise gives back" not in raise_.why
    assert remedy_ids(f)[0] == "vllm.gpu-memory-utilization.raise"


def test_a_device_buffer_after_a_failed_pinned_model_buffer_is_the_weights() -> None:
    """fresh-103: load_tensors' pinned host buffer fails, then the device buffer: the weights do not
    fit, so fewer offloaded layers lead, and the KV cache's type (no cache yet) is not offered."""
    f = only_error(diagnose_text(
        "ggml_cuda_host_malloc: failed to allocate 335445.83 MiB of pinned memory: out of memory\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 28426.68 MiB on device 0: cudaMalloc failed: "
        "out of memory\n"
    ))
    assert f.phase == "weights-load"
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    assert remedy_ids(f)[0] == "ggml.n-gpu-layers"
    assert "ggml.kv-cache-type" not in remedy_ids(f)


def test_a_cpu_compute_buffer_that_exhausts_ram_gets_a_smaller_ubatch_first() -> None:
    """fresh-101: ggml_gallocr_reserve_n's 129.62 GiB CPU compute buffer: -ub, not the KV type."""
    f = only_error(diagnose_text(
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer\n\n"
        "ggml_gallocr_reserve_n: failed to allocate CPU buffer of size 139183763104\n"
    ))
    # a compute buffer with no line saying which step reserved it (context creation or decoding)
    assert f.phase == "unknown"
    first = f.remedies[0]
    assert (first.id, first.flags, first.saves_bytes) == ("ggml.ubatch-size", {"-ub": "256", "-b": "256"}, 69591881552)


_POOL = (
    "Llama.generate: prefix-match hit\n"
    "ggml_new_tensor_impl: not enough space in the context's memory pool (needed 35007776, available 12582912)\n"
)


def test_ggml_context_pool_overflow_takes_the_batch_back_to_512_in_llama_cpp_pythons_knob() -> None:
    """fresh-092: llama-cpp-python's server launched with --n_batch 4096 overflows ggml's fixed pool."""
    f = only_error(diagnose_text(
        _POOL + "./run.sh: line 1:   432 Segmentation fault      python -m llama_cpp.server --n_gpu_layers 100 "
        "--n_ctx 4096 --n_batch 4096 --model /m/stablebeluga-13b.ggmlv3.q8_0.bin\n"
    ))
    assert f.product == "llama-cpp-python"
    first = f.remedies[0]
    assert (first.id, first.flags, first.settings) == ("ggml.n-batch-pool", {}, {"n_batch": "512"})
    assert "ggml.n-gpu-layers" not in remedy_ids(f)  # a CPU pool: GPU layers do not change it


def test_the_same_overflow_under_llama_cpp_speaks_in_its_flag() -> None:
    f = only_error(diagnose_text("$ ./main -m models/13b.ggmlv3.q8_0.bin -c 4096 -b 2048 -ngl 40\n" + _POOL))
    assert f.product == "llama.cpp"
    assert (f.remedies[0].id, f.remedies[0].flags) == ("ggml.n-batch-pool", {"-b": "512"})


def test_without_a_stated_batch_no_batch_value_is_invented() -> None:
    f = only_error(diagnose_text(_POOL))
    assert "ggml.n-batch-pool" not in remedy_ids(f)


def test_llama_cpp_python_gets_its_own_keyword_for_flash_attention() -> None:
    """other-002 (llama-cpp-python): a compute buffer failed with flash attention not shown on, so
    Llama(flash_attn=True) is offered, and no q8_0 KV cache (type_k/type_v): it does not shrink that
    buffer, and the flash attention it needs does by itself."""
    f = only_error(diagnose("llamacpp/other-002.log"))
    fa = remedy(f, "ggml.flash-attn")
    assert (fa.flags, fa.settings) == ({}, {"flash_attn": "True"})
    assert "ggml.kv-cache-type" not in remedy_ids(f)


_KV_FULL = (
    "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 2\n"
    "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 1\n"
    "update_slots : failed to decode the batch, n_batch = 1, ret = 1\n"
)


def test_llama_server_kv_cache_full_is_a_context_too_small_for_the_request() -> None:
    """other-084: llama.cpp's server retried down to one token: raise -c, never a smaller batch."""
    f = only_error(diagnose_text("llama_new_context_with_model: n_ctx      = 4096\n" + _KV_FULL))
    assert f.cause is not None and f.cause.id == "kv-cache-too-small"
    assert "even with a batch of 1 token(s)" in f.cause.summary
    assert (f.remedies[0].id, f.remedies[0].flags) == ("ggml.ctx-size.raise", {"-c": "8192"})
    ids = remedy_ids(f)
    assert not {"ggml.ubatch-size", "ggml.kv-cache-type", "ggml.ctx-size"} & set(ids)


def test_without_the_context_size_nothing_is_doubled() -> None:
    """No n_ctx in the log: the context is named without a value (no doubled number), then the ask."""
    f = only_error(diagnose_text(_KV_FULL))
    assert f.cause is not None and f.cause.id == "kv-cache-too-small"
    assert remedy_ids(f) == ["ggml.ctx-size.raise", "ask.launch-facts"]
    assert f.remedies[0].flags == {}


def test_vllms_llm_class_gets_keyword_arguments_not_cli_flags() -> None:
    """vllm-016 (LLM(...) in the user's script): EngineArgs fields as keywords, a switch as True."""
    f = only_error(diagnose("vllm/vllm-016.log"))
    assert f.product == "vllm-python"
    assert all(not r.flags for r in f.remedies)
    first = f.remedies[0]
    assert (first.id, first.settings) == ("vllm.gpu-memory-utilization.raise-for-kv", {"gpu_memory_utilization": "0.86"})
    assert first.command is None


def test_a_switch_becomes_true() -> None:
    from oomdoctor.advisor.product_knobs import in_product_knobs
    from oomdoctor.report import Remedy

    r = Remedy(id="vllm.enforce-eager", title="t", flags={"--enforce-eager": ""}, fits=None, confidence="medium", why="w")
    assert in_product_knobs(r, "vllm-python") is r
    assert (r.flags, r.settings) == ({}, {"enforce_eager": "True"})
    s = Remedy(id="vllm.enforce-eager", title="t", flags={"--enforce-eager": ""}, fits=None, confidence="medium", why="w")
    assert in_product_knobs(s, "vllm-serve") is s
    assert (s.flags, s.settings) == ({"--enforce-eager": ""}, {})


_COMPUTE_2_5G = (
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2560.00 MiB on device 0: cudaMalloc failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 2684354560\n"
    "llama_new_context_with_model: failed to allocate compute buffers\n"
)


def test_a_small_kv_cache_gets_no_kv_type_for_a_large_compute_buffer() -> None:
    """256 MiB of KV cache against a 2.5 GiB compute buffer: q8_0 would save 120 MiB, under a tenth."""
    f = only_error(diagnose_text(
        "llama_new_context_with_model: n_ctx      = 2048\n"
        "llama_kv_cache_init:      CUDA0 KV buffer size =   256.00 MiB\n" + _COMPUTE_2_5G
    ))
    assert f.phase == "kv-cache-alloc"  # reserved while llama_new_context_with_model creates the context
    assert "ggml.kv-cache-type" not in remedy_ids(f)


def test_a_kv_cache_in_host_memory_gets_no_kv_type_for_a_gpu_buffer() -> None:
    f = only_error(diagnose_text(
        "llama_new_context_with_model: n_ctx      = 65536\n"
        "llama_kv_cache_init:  CUDA_Host KV buffer size =  8192.00 MiB\n" + _COMPUTE_2_5G
    ))
    assert "ggml.kv-cache-type" not in remedy_ids(f)


def test_a_large_gpu_kv_cache_still_gets_the_kv_type_with_flash_attention_on() -> None:
    """Flash attention on: the compute buffer no longer holds the attention scores, and the KV
    cache q8_0 gives back makes room for it."""
    f = only_error(diagnose_text(
        "llama_new_context_with_model: n_ctx      = 65536\n"
        "llama_new_context_with_model: flash_attn = 1\n"
        "llama_kv_cache_init:      CUDA0 KV buffer size =  8192.00 MiB\n" + _COMPUTE_2_5G
    ))
    assert remedy(f, "ggml.kv-cache-type").saves_bytes == 4026531840  # 8 GiB x (1 - 8.5/16)
    assert "ggml.flash-attn" not in remedy_ids(f)


def test_a_compute_buffer_without_flash_attention_gets_flash_attention_not_the_kv_type() -> None:
    """The same failure with flash attention not shown on: the buffer is the attention scratch
    (n_ctx × n_ubatch per head); q8_0 does not shrink it. At 65536 tokens the context leads, sized
    by the KV cache it frees (flash attention state unknown: the buffer counted as fixed):
    8 GiB / 65536 = 128 KiB per token, ⌈2560 MiB / 128 KiB⌉ = 20480 tokens fewer → 45056."""
    f = only_error(diagnose_text(
        "llama_new_context_with_model: n_ctx      = 65536\n"
        "llama_kv_cache_init:      CUDA0 KV buffer size =  8192.00 MiB\n" + _COMPUTE_2_5G
    ))
    assert "ggml.kv-cache-type" not in remedy_ids(f)
    assert [(r.id, r.flags) for r in f.remedies[:3]] == [
        ("ggml.ctx-size", {"-c": "45056"}), ("ggml.flash-attn", {"-fa": "on"}), ("ggml.ubatch-size", {"-ub": "256", "-b": "256"}),
    ]


def test_no_utilization_step_for_a_shortfall_no_gpu_could_give_back() -> None:
    """44 GiB needed against 8.20 GiB: +0.05 of even the largest card oomdoctor knows is far less
    than the 35.80 GiB missing, so the step is not offered; the length from vLLM's estimate leads."""
    f = only_error(diagnose_text(
        "ValueError: To serve at least one request with the models's max seq len (1048576), (44.00 GiB KV cache is "
        "needed), which is larger than the available KV cache memory (8.20 GiB). Based on the available memory, the "
        "estimated maximum model length is 199552. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.\n"
    ))
    assert (f.remedies[0].id, f.remedies[0].flags) == ("vllm.max-model-len", {"--max-model-len": "199552"})
    assert "vllm.gpu-memory-utilization.raise" not in remedy_ids(f)


def test_torch_memory_saver_curesult_2_is_an_oom_of_the_colocated_rollout() -> None:
    """torch_memory_saver 0.0.6 prints CUresult 2 (CUDA_ERROR_OUT_OF_MEMORY) and exits; under verl the
    rollout engine could not take its memory back: the rollout's own share comes first."""
    f = only_error(diagnose_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang\n"
        " [torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp func=cu_mem_create line=103\n"
    ))
    assert (f.rule, f.figures.get("function")) == ("torch-memory-saver.curesult-oom", "cu_mem_create")
    assert f.cause is not None and f.cause.id == "colocation"
    # verl's own offload settings (verl 0.5.0 _generated_ppo_trainer.yaml) first, then the rollout's share
    assert remedy_ids(f)[:2] == ["rl.free-training-memory", "rl.rollout-gpu-memory-utilization"]


_WAKE_UP = (
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/engine/llm_engine.py", line 1859, in wake_up\n'
    "    self.model_executor.wake_up()\n"
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/worker/worker.py", line 140, in wake_up\n'
    "    allocator.wake_up()\n"
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", line 207, in wake_up\n'
    "    create_and_map(handle)\n"
    '  File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", line 75, in create_and_map\n'
    "    python_create_and_map(*allocation_handle)\n"
    "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62\n"
)


def test_sleep_mode_wake_up_is_the_llm_class_and_frees_the_trainer_first() -> None:
    """fresh-048's traceback (no framework named): LLM.wake_up() is the LLM class's API (`vllm serve`
    has /wake_up only under VLLM_SERVER_DEV_MODE), and the trainer's memory is freed before it."""
    f = only_error(diagnose_text(_WAKE_UP))
    assert f.product == "vllm-python"
    assert f.cause is not None and f.cause.id == "colocation"
    first = f.remedies[0]
    assert first.id == "rl.free-training-memory" and list(first.settings) == ["torch.cuda.empty_cache()"]
    share = remedy(f, "rl.rollout-gpu-memory-utilization")
    assert "0.1" not in share.settings["gpu_memory_utilization"]  # no step the log does not size


def test_verl_wake_up_offloads_the_actor_in_verls_settings() -> None:
    f = only_error(diagnose_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \\\n"
                                 + _WAKE_UP))
    assert f.remedies[0].settings == {
        "actor_rollout_ref.actor.fsdp_config.param_offload": "True",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "True",
        "actor_rollout_ref.ref.fsdp_config.param_offload": "True",
    }
    # no training-side figure: the share's step is the stated assumption, 0.6 - 0.1
    assert remedy(f, "rl.rollout-gpu-memory-utilization").settings == {
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.5"}


def test_verl_offload_already_on_is_not_offered_again() -> None:
    f = only_error(diagnose_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.actor.fsdp_config.param_offload=True \\\n"
                                 + _WAKE_UP))
    assert "rl.free-training-memory" not in remedy_ids(f)
    assert f.remedies[0].id == "rl.rollout-gpu-memory-utilization"


def test_openrlhf_deepspeed_sleep_needs_colocate_all_models() -> None:
    """fresh-049's shape: OpenRLHF's Ray actor; --deepspeed_enable_sleep (openrlhf 0.8.5) acts only with
    --colocate_all_models, which the log does not show: offered after the share, at low confidence."""
    log = "".join(f"(ActorModelRayActor pid=348952) {line}\n" for line in _WAKE_UP.splitlines())
    f = only_error(diagnose_text(log))
    assert remedy_ids(f)[:2] == ["rl.rollout-gpu-memory-utilization", "rl.free-training-memory"]
    off = remedy(f, "rl.free-training-memory")
    assert (off.settings, off.confidence) == ({"--deepspeed_enable_sleep": "", "--colocate_all_models": ""}, "low")


def test_training_side_oom_sizes_the_rollout_share_from_the_message() -> None:
    """fresh-053's message: (2.63 GiB − 2.61 GiB) / 79.11 GiB rounds up to one 0.05 step."""
    f = only_error(diagnose_text(
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB. GPU 3 has a total "
        "capacity of 79.11 GiB of which 2.61 GiB is free. Including non-PyTorch memory, this process has 0 bytes "
        "memory in use. Of the allocated memory 48.16 GiB is allocated by PyTorch, and 3.48 GiB is reserved by "
        "PyTorch but unallocated.\n"
        '[rank0]:   File "/mnt/users/ms-swift/swift/cli/rlhf.py", line 5, in <module>\n'
    ))
    assert "rl.free-training-memory" not in remedy_ids(f)  # the trainer needs its state while training
    assert f.remedies[0].settings == {"--vllm_gpu_memory_utilization": "at least 0.05 lower than now"}


def test_sglang_weights_nearly_filling_the_gpu_size_the_fraction_and_say_it_is_tight() -> None:
    """fresh-112: "Load weight end" states 21.73 GB free after 166.59 GB of weights, so 188.32 GB before:
    1 − 21.73/188.32 = 0.8846, + 0.05 for a pool = 0.94; that leaves 11.30 GiB outside the pool, less
    than SGLang's own default reserve, so the weights are the cause and fp8 is offered beside it."""
    f = only_error(diagnose_text(
        "[2025-07-02 07:41:58 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=21.73 GB, mem usage=166.59 GB.\n"
        "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. "
        "Use the profiled value instead.\n"
    ))
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    first = f.remedies[0]
    assert (first.id, first.flags, first.confidence) == (
        "sglang.mem-fraction-static.raise", {"--mem-fraction-static": "0.94"}, "low")
    assert "11.30 GiB outside the pool" in first.why
    assert remedy(f, "sglang.quantization").flags == {"--quantization": "fp8"}


def test_only_the_engines_own_remedies_become_keywords() -> None:
    """docker run's --shm-size is no keyword of LLM(...); a llama.cpp flag llama-cpp-python lacks drops the remedy."""
    from oomdoctor.advisor.product_knobs import in_product_knobs
    from oomdoctor.report import Remedy

    shm = Remedy(id="host.shm-size", title="t", flags={"--shm-size": "16g"}, fits=None, confidence="medium", why="w")
    assert in_product_knobs(shm, "vllm-python") is shm and shm.flags == {"--shm-size": "16g"}
    odd = Remedy(id="ggml.tensor-split", title="t", flags={"--tensor-split": "1,1"}, fits=None, confidence="low", why="w")
    assert in_product_knobs(odd, "llama-cpp-python") is None
    fa = Remedy(id="ggml.flash-attn", title="t", flags={"-fa": "on"}, fits=None, confidence="low", why="w")
    assert in_product_knobs(fa, "llama-cpp-python") is fa and fa.settings == {"flash_attn": "True"}


# --- the cause's own knob without a value (advisor/unsized.py) -----------------------------------

_TGI_WARMUP = (
    "thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would exceed allowed "
    "memory. (out of memory)\\nCurrently allocated : 16.08 GiB\\nRequested : 4.83 GiB\\nDevice limit : 22.20 GiB"
    "\\nFree (according to CUDA): 11.12 MiB\\nPyTorch limit (set by user-supplied memory fraction)\\n : 22.20 GiB\")', "
    "router/src/main.rs:216:18\n"
    "2023-07-07T17:55:43.805488Z ERROR text_generation_launcher: Webserver Crashed\n"
)


def test_tgi_warmup_without_its_args_names_the_prefill_budget_then_asks() -> None:
    """other-019: TGI's warm-up needs 4.83 GiB more; its Args line is not in the log, so no value can
    be put on --max-batch-prefill-tokens, but it is still the knob, ahead of the ask for facts."""
    f = only_error(diagnose_text(_TGI_WARMUP))
    assert remedy_ids(f) == ["tgi.max-batch-prefill-tokens", "ask.launch-facts"]
    first = f.remedies[0]
    assert (first.rank, first.title, first.flags, first.fits, first.confidence) == (
        1, "Lower --max-batch-prefill-tokens", {}, None, "low")
    assert "Args line" in first.why and "--max-input-length before TGI 2.0" in first.why
    assert f.remedies[1].rank == 2


def test_tgi_with_its_args_line_gets_the_sized_value_not_the_unsized_one() -> None:
    """The same warm-up with the launcher's Args line: half of the stated 4096 prefill tokens."""
    f = only_error(diagnose_text(
        "Args { model_id: \"google/flan-t5-xl\", max_input_length: 1024, max_total_tokens: 2048, "
        "max_batch_prefill_tokens: 4096, cuda_memory_fraction: 1.0 }\n" + _TGI_WARMUP
    ))
    first = f.remedies[0]
    assert first.id == "tgi.max-batch-prefill-tokens"
    assert first.flags == {"--max-batch-prefill-tokens": "2048"}
    assert "ask.launch-facts" not in remedy_ids(f)


def test_sglang_request_slots_name_max_running_requests() -> None:
    """other-022: alloc_req_slots' own message asks for a smaller --max-running-requests; the limit
    is not in the log, so the knob leads without a value and the ask follows."""
    f = only_error(diagnose_text(
        "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
        "`--max-running-requests`. self.req_to_token_pool.available_size()=1, num_reqs=2,\n"
    ))
    assert remedy_ids(f) == ["sglang.max-running-requests", "ask.launch-facts"]
    assert f.remedies[0].title == "Lower --max-running-requests"
    assert f.remedies[0].flags == {}


def test_sglang_request_slots_with_the_stated_limit_halve_it() -> None:
    """With the server's max_running_requests in the log, the knob carries half of it."""
    f = only_error(diagnose_text(
        "server_args=ServerArgs(model_path='Qwen/Qwen2-7B', mem_fraction_static=0.88, max_running_requests=64)\n"
        "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
        "`--max-running-requests`. self.req_to_token_pool.available_size()=1, num_reqs=2,\n"
    ))
    assert f.remedies[0].id == "sglang.max-running-requests"
    assert f.remedies[0].flags == {"--max-running-requests": "32"}


def test_llama_server_kv_full_without_n_ctx_names_the_context() -> None:
    """other-084: the server's KV cache had no cell even for one token, and -c is not in the log:
    raise the context (or fewer slots), never a smaller batch."""
    f = only_error(diagnose_text(_KV_FULL))
    assert f.remedies[0].title == "Raise the context (-c / --ctx-size), or serve fewer slots (-np)"
    assert "The log does not show -c" in f.remedies[0].why


def test_an_unsized_knob_of_another_engine_is_never_offered() -> None:
    """A bare CUDA OOM names no engine: no TGI, SGLang or llama.cpp knob is offered without a value."""
    f = only_error(diagnose_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.71 GiB. GPU 0 has a total capacity of "
        "22.30 GiB of which 1.52 GiB is free. Of the allocated memory 19.55 GiB is allocated by PyTorch, and "
        "244.94 MiB is reserved by PyTorch but unallocated.\n"
    ))
    assert not [r for r in f.remedies if r.id.split(".")[0] in ("tgi", "sglang", "ggml", "ollama", "trtllm")]


# --- the job's own ranks on one GPU (advisor/siblings.py) -----------------------------------------

_RANKS_ON_GPU0 = (
    "[09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] Error executing load_single_module with args "
    "('model.layers.9.mlp.gate_up_proj', Linear()): CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a "
    "total capacity of 22.07 GiB of which 20.62 MiB is free. Process 157 has 270.00 MiB memory in use. Process 451 "
    "has 1.16 GiB memory in use. Including non-PyTorch memory, this process has 1.12 GiB memory in use. Process 453 "
    "has 1.28 GiB memory in use. Process 454 has 1.14 GiB memory in use. Process 455 has 1.20 GiB memory in use. "
    "Process 450 has 7.69 GiB memory in use. Process 456 has 1.08 GiB memory in use. Process 457 has 1.16 GiB "
    "memory in use. Of the allocated memory 880.00 MiB is allocated by PyTorch, and 20.00 MiB is reserved by "
    "PyTorch but unallocated.\n"
)


def test_a_jobs_ranks_stacked_on_one_gpu_are_a_placement_not_processes_to_stop() -> None:
    """new-030: TensorRT-LLM rank 2 fails on GPU 0 next to seven processes with PIDs 450-457 (the
    job's other ranks): give each rank its own GPU; never "stop the other processes", which would
    stop the job, and no weights or KV-share remedy for a load on the wrong GPU."""
    f = only_error(diagnose_text(_RANKS_ON_GPU0))
    assert f.ranks == ["rank2"] and f.product == "trtllm"
    assert f.cause is not None and f.cause.id == "placement"
    assert f.cause.summary.startswith("7 processes with PIDs started together (450–457: this job's other ranks) "
                                      "hold 14.71 GiB on GPU 0")
    assert remedy_ids(f) == ["gpu.rank-devices"]
    first = f.remedies[0]
    assert first.saves_bytes == 15794742232  # each stated size in bytes, summed: 1.16 + 1.28 + 1.14 + 1.20 + 7.69 + 1.08 + 1.16 GiB
    assert [s.command for s in first.run] == ["nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv"]
    # in TensorRT-LLM's terms: its 8 MPI ranks (7 siblings + this one) need 8 GPUs visible and a world of 8;
    # not torch.cuda.set_device, which only the user's own PyTorch code calls
    assert (first.env, first.settings) == ({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, {"tp_size": "8"})
    assert "torch.cuda.set_device" not in first.why


def test_trtllm_ranks_on_gpu0_with_fewer_gpus_known_shrink_the_world() -> None:
    """The same 8 ranks on a host the hints say has 4 GPUs: tp_size 4 over GPUs 0-3."""
    f = only_error(oomdoctor.diagnose(_RANKS_ON_GPU0, hints={"gpus": "4"}))
    first = f.remedies[0]
    assert (first.env, first.settings) == ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, {"tp_size": "4"})


def test_scattered_pids_without_ranks_are_other_processes() -> None:
    """The same figures on a single-process run (no rank label, no parallelism): other processes."""
    line = _RANKS_ON_GPU0.split("[E] ", 1)[1]
    f = only_error(diagnose_text(line))
    assert f.cause is not None and f.cause.id == "other-processes"
    assert remedy_ids(f)[0] == "gpu.free-other-processes"


def test_ranks_with_pids_far_apart_are_not_siblings() -> None:
    """A ranked line whose other processes have PIDs far apart (other users' jobs): other processes."""
    line = re.sub(r"Process 45(\d)", lambda m: f"Process {int(m[1]) * 1000 + 17}", _RANKS_ON_GPU0)
    f = only_error(diagnose_text(line))
    assert f.cause is not None and f.cause.id == "other-processes"


def test_a_multi_paragraph_message_under_a_rank_prefix_is_read_whole() -> None:
    """fresh-046: TensorRT-LLM's executor failure, its figures in bare lines after a blank one."""
    f = only_error(diagnose_text(
        "[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: Executor creation "
        "failed due to insufficient GPU memory.\n\nThe following component could not be created: KV cache\n"
        "Total GPU memory (GiB): 140.06\nFree GPU memory before component creation attempt (GiB): 108.86\n"
    ))
    assert f.rule == "trtllm.executor-insufficient-memory"
    assert f.figures == {"component": "KV cache", "total_bytes": 150388279869, "free_bytes": 116887534961}


def test_lorax_keeps_tgi_0_9s_input_flag() -> None:
    """fresh-062: LoRAX forked TGI 0.9 and has --max-input-length, not TGI 2's --max-input-tokens."""
    f = only_error(diagnose_text(
        "2024-03-20T07:57:45.050465Z ERROR warmup{max_input_length=1024 max_prefill_tokens=1024 "
        "max_total_tokens=2048}:warmup: lorax_client: router/client/src/lib.rs:34: Server error: Not enough memory "
        "to handle 1024 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n"
        "2024-03-20T07:57:45.117908Z ERROR lorax_launcher: Webserver Crashed\n"
    ))
    assert f.product == "lorax"
    assert remedy(f, "tgi.max-batch-prefill-tokens").flags == {"--max-batch-prefill-tokens": "512",
                                                               "--max-input-length": "512"}
    # 1024 is below LoRAX's default prefill budget (4096 up to v0.10.0): quantizing leads
    assert f.remedies[0].flags == {"--quantize": "eetq"}


def test_tensorflow_reserving_a_pool_larger_than_any_gpu_is_a_bogus_device_size() -> None:
    """other-037: TensorFlow on ROCm asks the device for 127.99 TiB, then a tenth less each time: the
    device reported a bogus size. Memory growth first (what worked, per the thread), then the device
    binding and the build, asked on ROCm with rocm-smi and TensorFlow's own view; none of JAX's variables."""
    f = only_error(diagnose_text(
        "2023-11-01 16:19:17.812101: E tensorflow/compiler/xla/stream_executor/rocm/rocm_driver.cc:606] failed to "
        "allocate 127.99TiB (140729850295296 bytes) from device: HIP_ERROR_OutOfMemory\n"
        "2023-11-01 16:19:17.812133: E tensorflow/compiler/xla/stream_executor/rocm/rocm_driver.cc:606] failed to "
        "allocate 115.19TiB (126656857505792 bytes) from device: HIP_ERROR_OutOfMemory\n"
    ))
    assert (f.engine, f.product) == ("tensorflow", "tensorflow")
    assert f.cause is not None and f.cause.id == "driver-fault"
    assert f.cause.summary.startswith("TensorFlow tried to reserve a pool of 127.99 TiB, more than any GPU has")
    assert [r.id for r in f.remedies[:2]] == ["tf.memory-growth", "ask.driver-facts"]
    assert f.remedies[0].env == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert f.remedies[1].title.startswith("Check which GPU the job is bound to")
    assert f.remedies[1].run[0].command.startswith("rocm-smi --showmeminfo vram; python -c 'import tensorflow as tf;")
    assert not [r for r in f.remedies if any(k.startswith("XLA_PYTHON_CLIENT") for k in r.env)]


def test_jaxs_own_allocation_failure_is_not_read_as_tensorflow() -> None:
    """jaxlib's glog prefix names external/xla/..., never tensorflow/: it stays JAX."""
    f = only_error(diagnose_text(
        "E0101 00:00:00.000000 1234 external/xla/xla/stream_executor/cuda/cuda_driver.cc:606] failed to allocate "
        "79.00GiB (84825604096 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
    ))
    assert f.engine != "tensorflow" and f.product != "tensorflow"


_WIN_LLAMA = (
    "$ llama-server -m C:\\models\\IQ4_XS\\MiniMax-M3-IQ4_XS-00001-of-00006.gguf -c 50000 -ngl 99 "
    "--tensor-split 11,11,10 -ub 2048 -b 2048\n"
    "1.06.520.077 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 51748.72 MiB on device 1: cudaMalloc "
    "failed: out of memory\n"
    "1.06.520.084 E ggml_gallocr_reserve_n_impl: failed to allocate CUDA1 buffer of size 54262464512\n"
    "1.06.520.086 E graph_reserve: failed to allocate compute buffers\n"
)


def test_the_physical_batch_is_read_from_the_command_and_windows_paths_survive() -> None:
    """fresh-066: -ub 2048 on the command line (not the default 512) is halved, and the corrected
    command keeps the Windows path's backslashes (quoted for the shell)."""
    f = only_error(diagnose_text(_WIN_LLAMA))
    first = f.remedies[0]
    assert first.id == "ggml.ubatch-size"
    assert first.flags == {"-ub": "1024", "-b": "1024"}
    assert "(2048)" in first.why
    assert first.command is not None
    assert first.command.startswith("llama-server -m 'C:\\models\\IQ4_XS\\MiniMax-M3-IQ4_XS-00001-of-00006.gguf' ")
    assert "-ub 1024 -b 1024" in first.command


def test_a_posix_escape_is_still_an_escape() -> None:
    """Without a drive-letter path, a backslash keeps its shell meaning (an escaped space)."""
    argv, _ = parse_argv("llama-server -m /models/my\\ model.gguf -c 4096")
    assert argv[:3] == ["llama-server", "-m", "/models/my model.gguf"]
    argv, _ = parse_argv("llama-server -m C:\\m\\a.gguf -c 4096")
    assert argv[2] == "C:\\m\\a.gguf"


def test_a_failure_in_the_samplers_sort_names_max_num_seqs() -> None:
    """vllm-038: the top-k/top-p sort of the logits (one vocabulary row per sequence) failed while
    serving; the limit is not in the log, so --max-num-seqs is named without a value."""
    f = only_error(diagnose_text(
        "(EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842]     logits_sort, logits_idx = "
        "logits.sort(dim=-1, descending=False)\n"
        "(EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 1.47 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.25 GiB is free. "
        "Including non-PyTorch memory, this process has 77.85 GiB memory in use. Of the allocated memory 70.05 GiB "
        "is allocated by PyTorch, and 36.12 MiB is reserved by PyTorch but unallocated.\n"
    ))
    seqs = remedy(f, "vllm.max-num-seqs")
    assert (seqs.title, seqs.flags, seqs.confidence) == ("Lower --max-num-seqs", {}, "low")
    assert "sampler (logits.sort)" in seqs.why
    assert remedy_ids(f).index("vllm.max-num-seqs") <= 2


def test_ranks_holding_the_same_memory_are_still_siblings() -> None:
    """Ranks of one job often hold the same memory as the failing one: only one listed entry equal
    to this process's "in use" is taken for it, the others stay siblings."""
    f = only_error(diagnose_text(
        "[01/02/2026-10:00:00] [TRT-LLM] [RANK 1] [E] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "20.00 MiB. GPU 0 has a total capacity of 79.10 GiB of which 10.00 MiB is free. Process 1201 has 20.00 GiB "
        "memory in use. Process 1202 has 20.00 GiB memory in use. Process 1203 has 19.00 GiB memory in use. "
        "Including non-PyTorch memory, this process has 20.00 GiB memory in use. Of the allocated memory 19.50 GiB "
        "is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated.\n"
    ))
    assert f.cause is not None and f.cause.id == "placement"
    assert remedy_ids(f) == ["gpu.rank-devices"]
    assert f.remedies[0].saves_bytes == 41875931136  # 20.00 GiB + 19.00 GiB: two siblings, this rank left out


# -- vLLM's DeepGEMM warm-up, IPEX's 4 GB block limit, DeepSpeed placing the whole model -----------

_DEEP_GEMM = (
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815]   File "
    '"/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py", line 262, in _warmup\n'
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815] torch.OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate 666.00 MiB. GPU 3 has a total capacity of 95.10 GiB of which 145.94 MiB is free. "
    "Process 53397 has 94.95 GiB memory in use. Of the allocated memory 92.33 GiB is allocated by PyTorch, and "
    "32.77 MiB is reserved by PyTorch but unallocated.\n"
)


def test_a_deep_gemm_warm_up_failure_offers_its_switch_and_not_eager_mode() -> None:
    """fresh-107 (the frame's line hard-wrapped in the real log): the warm-up runs before any CUDA graph
    is captured, so --enforce-eager frees nothing it needs; VLLM_DEEP_GEMM_WARMUP=skip leaves it out."""
    f = only_error(diagnose("vllm/fresh-107.log"))
    # the wrapped frame's rest (read at once for its context trigger) joins its head (read later)
    assert f.phase == "warmup"
    assert f.cause is not None and f.cause.id == "engine-headroom"
    ids = remedy_ids(f)
    # skipping the warm-up removes the failing allocation itself (fits, medium); the lower budget is
    # computed from an assumed 0.90 (low), so the targeted switch leads
    assert ids[:2] == ["vllm.deep-gemm-warmup", "vllm.gpu-memory-utilization.lower"]
    assert "vllm.enforce-eager" not in ids
    skip = remedy(f, "vllm.deep-gemm-warmup")
    assert skip.env == {"VLLM_DEEP_GEMM_WARMUP": "skip"} and skip.fits is True
    assert "(0.10.2–0.11.0: VLLM_SKIP_DEEP_GEMM_WARMUP=1)" in skip.why  # no version in the log


def test_the_deep_gemm_switch_follows_the_version_in_the_log() -> None:
    """vLLM 0.11.1 renamed VLLM_SKIP_DEEP_GEMM_WARMUP=1 to VLLM_DEEP_GEMM_WARMUP=skip (vllm/envs.py)."""
    for version, env in (("0.11.0", {"VLLM_SKIP_DEEP_GEMM_WARMUP": "1"}), ("0.11.1", {"VLLM_DEEP_GEMM_WARMUP": "skip"})):
        log = f"INFO 11-25 08:00:00 [api_server.py:1000] vLLM API server version {version}\n" + _DEEP_GEMM
        skip = remedy(only_error(diagnose_text(log)), "vllm.deep-gemm-warmup")
        assert skip.env == env, version
        assert "VLLM_SKIP_DEEP_GEMM_WARMUP=1)" not in skip.why


def test_without_the_warm_up_frame_there_is_no_deep_gemm_switch() -> None:
    f = only_error(diagnose_text(_DEEP_GEMM.split("\n", 1)[1]))
    assert "vllm.deep-gemm-warmup" not in remedy_ids(f)


def test_ipex_refusing_a_block_over_4_gb_is_the_platform_not_the_batch() -> None:
    """new-012: 6.85 GiB asked on an empty 15.56 GiB Arc card; IPEX's CachingDeviceAllocator refuses
    any block over 4 GB on a device without 2D block arrays."""
    report = diagnose("other/new-012.log")
    f = report.findings[0]
    assert (f.rule, f.kind, f.severity) == ("ipex.xpu-allocation-size-cap", "torch.xpu-oom", "error")
    assert f.figures["requested_bytes"] == 7355131494 and f.figures["allocated_bytes"] == 0
    assert f.cause is not None and f.cause.id == "driver-fault"
    assert f.cause.summary.startswith("The platform refuses any single allocation larger than 4 GB")
    assert "6.85 GiB was asked" in f.cause.summary
    ids = remedy_ids(f)
    assert ids[0] == "xpu.split-allocation"
    assert "torch.reduce-batch" not in ids and "training.gradient-checkpointing" not in ids


def test_deepspeed_moving_the_whole_model_to_each_rank_asks_for_zero_3() -> None:
    """other-012: NCCL's broadcast OOM inside DeepSpeed's _configure_distributed_model (deepspeed
    0.14.0 engine.py: the module goes to the device unless zero.Init partitioned it)."""
    f = only_error(diagnose("deepspeed/other-012.log"))
    assert f.cause is not None and f.cause.id == "placement"
    first = f.remedies[0]
    assert first.id == "training.deepspeed-zero"
    assert first.settings == {"zero_optimization.stage": "3"}
    assert "(_configure_distributed_model)" in first.why
    ids = remedy_ids(f)
    assert "torch.reduce-batch" not in ids and "training.gradient-checkpointing" not in ids


def test_a_shared_memory_tensor_that_cannot_be_written_is_dev_shm() -> None:
    """fresh-075: torch's shared-memory file /torch_<pid>_<n> could not be written (TH's THAllocator.c;
    ATen's MapAllocator.cpp today): /dev/shm is full, not the GPU."""
    f = only_error(diagnose("pytorch/fresh-075.log"))
    assert (f.rule, f.kind) == ("host.shm-file-write-failed", "host.shm-insufficient")
    assert f.cause is not None and f.cause.id == "shared-memory"
    first = f.remedies[0]
    assert first.id == "host.shm-size" and first.flags == {"--shm-size": "1g"}
    assert "torch.reduce-batch" not in remedy_ids(f)


def test_a_regular_file_that_cannot_be_written_is_not_shared_memory() -> None:
    report = diagnose_text("OSError: unable to write to file </data/checkpoints/model.pt>: No space left on device\n")
    assert [f.rule for f in report.findings if f.rule == "host.shm-file-write-failed"] == []


def test_old_ollamas_ggml_cuda_error_offers_the_context_without_a_value() -> None:
    """fresh-104: ollama of November 2023 (llama.cpp b1500-b1600's CUDA_CHECK wording), nothing else in
    the log: the context is the first knob, unsized, and the launch facts are asked for."""
    f = only_error(diagnose("ollama/fresh-104.log"))
    assert (f.rule, f.product) == ("ggml.cuda-error-oom.legacy", "ollama")
    assert f.cause is not None and f.cause.id == "unknown"
    assert remedy_ids(f) == ["ollama.num-ctx", "ask.launch-facts"]
    assert f.remedies[0].settings == {"num_ctx": "half of the current value (the server log's n_ctx line shows it)"}
    assert f.remedies[0].title == "Lower the context (num_ctx)" and f.remedies[0].code == []


def test_a_4_bit_model_moved_whole_to_each_rank_is_sharded_on_load_not_re_quantized() -> None:
    """fresh-059 (axolotl): nn.Module.to's `convert` and bitsandbytes' Params4bit `to` frames: every
    rank is placing the whole (already 4-bit) model; ZeRO-3 in axolotl's own config shards it."""
    f = only_error(diagnose("transformers/fresh-059.log"))
    assert f.product == "axolotl"
    assert f.cause is not None and f.cause.id == "placement"
    first = f.remedies[0]
    assert first.id == "training.shard-state"
    assert first.settings == {"deepspeed": "deepspeed_configs/zero3.json"}
    assert first.why.startswith("Every rank is loading the whole model onto its GPU")
    ids = remedy_ids(f)
    for absent in ("weights.quantize-on-load", "torch.reduce-batch", "training.gradient-checkpointing",
                   "training.optim-8bit", "training.lora"):
        assert absent not in ids, absent


# --- TGI's warm-up failing below the launcher's default prefill budget ------------------------------

_TGI_SMALL = ("RuntimeError: Not enough memory to handle 1024 prefill tokens. You need to decrease "
              "`--max-batch-prefill-tokens`\n")


def test_tgi_warmup_failing_below_the_default_prefill_quantizes_first() -> None:
    """other-017: 1024 < the launcher's default 4096 (TGI v1.0-v3.3): the weights fill the GPU, so
    --quantize leads and halving the prefill again is the stopgap after it."""
    f = only_error(diagnose_text(_TGI_SMALL))
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    assert (f.remedies[0].id, f.remedies[0].flags, f.remedies[0].confidence) == (
        "tgi.quantize", {"--quantize": "eetq"}, "medium")
    prefill = remedy(f, "tgi.max-batch-prefill-tokens")
    # TGI's rule kept: --max-batch-prefill-tokens ≥ the input limit
    assert prefill.flags == {"--max-batch-prefill-tokens": "512", "--max-input-length": "512"}
    assert prefill.confidence == "medium" and "stopgap" in prefill.why


def test_tgi_quantize_speaks_the_releases_values() -> None:
    """eetq arrived in TGI 1.1.0; 1.0.3 has bitsandbytes-nf4 (launcher/src/main.rs enum Quantization)."""
    f = only_error(diagnose_text("docker run ghcr.io/huggingface/text-generation-inference:1.0.3 --model-id x\n"
                                 + _TGI_SMALL))
    assert f.remedies[0].flags == {"--quantize": "bitsandbytes-nf4"}


def test_tgi_default_prefill_failure_keeps_the_prefill_first() -> None:
    """At 4096 (the default itself) the prefill budget is the lever, as before."""
    f = only_error(diagnose_text(_TGI_SMALL.replace("1024", "4096")))
    assert f.remedies[0].id == "tgi.max-batch-prefill-tokens"
    assert f.remedies[0].flags["--max-batch-prefill-tokens"] == "2048"


def test_tgi_num_shard_only_raises_a_known_smaller_shard_count() -> None:
    """The launcher shards over every visible GPU by default (find_num_shards (None, None)); a run
    with num_shard: Some(1) on a 4-GPU host is told --num-shard 4."""
    log = ('INFO text_generation_launcher: Args { model_id: "m", num_shard: Some(1), quantize: None }\n' + _TGI_SMALL)
    f = only_error(oomdoctor.diagnose(log, hints={"gpus": "4"}))
    assert f.remedies[0].flags == {"--num-shard": "4"}  # the GPUs are there: no model change needed
    assert "tgi.num-shard" not in remedy_ids(only_error(diagnose_text(log)))


# --- Stable Diffusion WebUI Forge (github lllyasviel/stable-diffusion-webui-forge, dfdcbab6) -------

def test_forge_runtime_oom_speaks_forges_own_knobs() -> None:
    """fixtures/pytorch/synthetic-forge-runtime-oom: the [GPU Setting] line gives 7164 MB to the
    weights and 1024 MB to computation: GPU Weights 7164 − 1024 = 6140 MB; then Forge's own flags."""
    f = only_error(diagnose("pytorch/synthetic-forge-runtime-oom.log"))
    assert f.product == "sd-webui-forge"
    assert remedy_ids(f) == ["forge.gpu-weights", "forge.always-offload-from-vram", "forge.resolution-batch",
                             "forge.cuda-malloc"]
    first = f.remedies[0]
    assert first.settings == {"GPU Weights (MB)": "6140"}
    assert [s.command for s in first.run] == ["nvidia-smi"]  # Windows' graphics processes hold VRAM too
    assert remedy(f, "forge.always-offload-from-vram").flags == {"--always-offload-from-vram": ""}
    assert remedy(f, "forge.cuda-malloc").flags == {"--cuda-malloc": ""}
    assert remedy(f, "forge.resolution-batch").settings["Batch size"] == "1"


def test_forge_without_its_gpu_setting_line_lowers_gpu_weights_in_words() -> None:
    f = only_error(diagnose_text(
        '  File "C:\\\\stable-diffusion-webui-forge\\\\modules_forge\\\\main_thread.py", line 30, in work\n'
        "RuntimeError: CUDA error: out of memory\n"
    ))
    assert f.product == "sd-webui-forge"
    assert f.remedies[0].id == "forge.gpu-weights"
    assert f.remedies[0].settings["GPU Weights (MB)"].startswith("lower than now")


def test_a1111_version_line_is_not_forge() -> None:
    f = only_error(diagnose_text("Version: v1.10.1\nRuntimeError: CUDA error: out of memory\n"))
    assert f.product != "sd-webui-forge"
    assert not [i for i in remedy_ids(f) if i.startswith("forge.")]
