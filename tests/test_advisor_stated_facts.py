"""The advisor reads what the log states before it advises: the engine behind a bare traceback, memory
held outside PyTorch's allocator, training state in the failing frame, a KV cache already 8-bit or
sized in bytes, a checkpoint already quantized. Each case is a real log's line (the corpus id in the
docstring) or a fixture."""

from __future__ import annotations

from oomdoctor.reader import split_prefix
from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids

_TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 546.00 MiB. GPU 0 has a total capacity of "
    "15.77 GiB of which 514.19 MiB is free. Process 562167 has 15.25 GiB memory in use. Of the allocated memory "
    "13.73 GiB is allocated by PyTorch, with 46.00 MiB allocated in private pools (e.g., CUDA Graphs), and "
    "736.86 MiB is reserved by PyTorch but unallocated."
)


def test_vllm_logger_layout_names_vllm() -> None:
    """fresh-079: a one-line torch OOM printed through vLLM's logger is vLLM's, not plain PyTorch's."""
    f = only_error(diagnose_text(f"ERROR 04-01 23:46:56 [engine.py:160] {_TORCH_OOM}\n"))
    assert (f.engine, f.product) == ("vllm", "vllm-serve")
    assert f.cause is not None and f.cause.id == "engine-headroom"
    assert remedy_ids(f)[0] == "vllm.gpu-memory-utilization.lower"
    assert "torch.reduce-batch" not in remedy_ids(f)


def test_the_same_line_without_vllms_layout_stays_pytorch() -> None:
    f = only_error(diagnose_text(f"ERROR 2024-04-01 23:46:56,123 {_TORCH_OOM}\n"))
    assert f.engine == "pytorch"


def test_gcp_logs_explorer_row_is_a_prefix() -> None:
    """vllm-038: Logs Explorer rows carry severity, time and labels before vLLM's own prefix."""
    prefix, message, rank = split_prefix(
        "INFO 2025-11-19T20:16:36.096625454Z [resource.labels.containerName: vllm] "
        "(EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] torch.OutOfMemoryError: CUDA"
    )
    assert message == "torch.OutOfMemoryError: CUDA"
    assert rank == "EngineCore_DP0 pid=270"
    assert prefix.endswith("[v1/engine/core.py:842]")


def test_async_engine_loop_names_vllm() -> None:
    """new-022: AsyncLLMEngine's 'Engine loop is not running' wraps a HIP OOM."""
    f = only_error(diagnose("vllm/new-022.log"))
    assert f.engine == "vllm"
    assert f.cause is not None and f.cause.id == "engine-headroom"


def test_memory_outside_pytorchs_allocator_is_not_called_other_processes() -> None:
    """other-026: 22.18 GiB in use by the process, 0 B of it PyTorch's: it is outside the allocator
    (another process, or this one's non-PyTorch pools) and the advice says so, at medium confidence."""
    f = only_error(diagnose("trtllm/other-026.log"))
    assert f.account is not None and f.account.get("outside-pytorch") == 23815593656
    assert f.cause is not None and f.cause.id == "other-processes"
    assert f.cause.summary.startswith("22.18 GiB of the GPU's 22.19 GiB is held outside PyTorch's allocator, which holds 0 B")
    first = f.remedies[0]
    assert (first.id, first.saves_bytes, first.confidence) == ("gpu.free-other-processes", 23815593656, "medium")
    assert "held outside PyTorch's allocator" in first.why


def test_ddp_gradient_buckets_are_training_state() -> None:
    """other-009: DistributedDataParallel's Reducer allocates a second copy of the model for the
    gradients: training state, sharded in the trainer's own setting; no batch or checkpointing advice."""
    f = only_error(diagnose("transformers/other-009.log"))
    assert f.cause is not None and f.cause.id == "training-state"
    # the request is the buckets (25.10 GiB), next to what the model already holds (25.80 GiB)
    assert f.cause.summary.startswith(
        "DistributedDataParallel asked for 25.10 GiB for its gradient buckets, one more copy of every trainable"
        " parameter, while this process already held 25.80 GiB"
    )
    assert remedy(f, "training.shard-state").settings == {"TrainingArguments(fsdp=...)": '"full_shard auto_wrap"'}
    assert remedy(f, "training.lora").settings == {"get_peft_model(model, ...)": "LoraConfig(r=16)"}
    assert remedy_ids(f)[:2] == ["training.shard-state", "training.lora"]
    for rid in ("training.gradient-checkpointing", "torch.reduce-batch", "training.batch-accumulation"):
        assert rid not in remedy_ids(f)


def test_zero_partition_frame_gets_no_activation_advice() -> None:
    """other-086: a 25 GiB fp32 optimizer partition in stage_1_and_2.py's step()."""
    f = only_error(diagnose("deepspeed/other-086.log"))
    assert f.cause is not None and f.cause.id == "training-state"
    assert remedy_ids(f)[0] == "training.deepspeed-zero"
    assert "training.gradient-checkpointing" not in remedy_ids(f)
    assert "torch.reduce-batch" not in remedy_ids(f)


_TRTLLM_EXECUTOR = """[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: Executor creation failed due to insufficient GPU memory.
The following component could not be created: KV cache
Total GPU memory (GiB): 140.06
Free GPU memory before component creation attempt (GiB): 108.86
"""


def test_trtllm_executor_kv_cache_component() -> None:
    """fresh-046: TensorRT-LLM's PyTorch backend names the component it could not create."""
    f = only_error(diagnose_text(_TRTLLM_EXECUTOR))
    assert f.rule == "trtllm.executor-insufficient-memory"
    assert f.figures["total_bytes"] == 150388279869 and f.figures["free_bytes"] == 116887534961
    assert f.figures["component"] == "KV cache"
    assert f.cause is not None and f.cause.id == "kv-cache-exceeds-free"
    assert remedy_ids(f)[0] == "trtllm.kv-cache-free-gpu-mem-fraction"


_VLLM_MAX_LEN = (
    "ValueError: To serve at least one request with the models's max seq len (221000), (10.12 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (5.59 GiB). Based on the available memory, the "
    "estimated maximum model length is 122080. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine.\n"
)


def test_fp8_kv_cache_said_is_not_offered_again() -> None:
    """fresh-001: 'with kv-cache-dtype fp8' above the failure: the cache is 8-bit already."""
    plain = only_error(diagnose_text(_VLLM_MAX_LEN))
    said = only_error(diagnose_text("with kv-cache-dtype fp8 and --max-model-len 221000\n" + _VLLM_MAX_LEN))
    assert "vllm.kv-cache-dtype-fp8" in remedy_ids(plain)
    assert "vllm.kv-cache-dtype-fp8" not in remedy_ids(said)
    assert remedy(said, "vllm.max-model-len").flags == {"--max-model-len": "122080"}


def test_sglang_fp8_checkpoint_is_not_quantized_again() -> None:
    """new-027: SGLang's 'Load weight end. quant=fp8' — the weights are FP8 already."""
    f = only_error(diagnose("sglang/new-027.log"))
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    assert "sglang.quantization" not in remedy_ids(f)
    assert remedy_ids(f)[0] == "sglang.mem-fraction-static.raise"


_KV_BYTES = (
    "(EngineCore pid=316) INFO 08-21 18:37:44 [gpu_worker.py:492] Initial free memory 31.16 GiB, reserved 4.25 "
    "GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.\n"
    "(EngineCore pid=316) ValueError: To serve at least one request with the models's max seq len (100000), "
    "(4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the "
    "available memory, the estimated maximum model length is 99520. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.\n"
)


def test_kv_cache_memory_bytes_is_the_knob_when_set() -> None:
    """new-003's layout: with kv_cache_memory_bytes set the utilization sizes nothing; the bytes do,
    to vLLM's needed figure rounded up to 0.01 GiB (4.26 GiB -> 4.27 GiB = 4584877486 bytes)."""
    f = only_error(diagnose_text(_KV_BYTES))
    assert remedy(f, "vllm.kv-cache-memory-bytes").flags == {"--kv-cache-memory-bytes": "4584877486"}
    for rid in ("vllm.gpu-memory-utilization.raise", "vllm.gpu-memory-utilization.raise-for-kv"):
        assert rid not in remedy_ids(f)


def test_kill_without_sizes_gets_swap_a_failed_host_request_does_not() -> None:
    killed = only_error(diagnose("vllm/vllm-042.log"))
    assert killed.cause is not None and killed.cause.id == "host-ram"
    swap = remedy(killed, "host.add-swap")
    assert swap.settings == {"swap size": "at least the peak resident size of the job (not in the log)"}
    assert swap.confidence == "low"
    request = only_error(diagnose_text(
        "RuntimeError: [enforce fail at alloc_cpu.cpp:83] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)\n"
    ))
    assert request.cause is not None and request.cause.id == "host-ram"
    assert "host.add-swap" not in remedy_ids(request)


def test_ollama_weights_without_layer_counts_still_point_at_num_gpu() -> None:
    """other-006: a 34.70 GiB weight buffer failed; the log shows neither the layers nor the free memory."""
    f = only_error(diagnose("ollama/other-006.log"))
    first = f.remedies[0]
    # the knob is named, its value only in words (the layer count is not in the log): no number
    assert (first.id, first.flags, first.confidence) == ("ollama.num-gpu", {}, "low")
    assert first.settings == {"num_gpu": "fewer than the layers offloaded now (ollama ps shows them)"}
    assert "ollama.num-ctx" not in remedy_ids(f)


def test_deepspeed_pinning_host_memory_is_host_ram() -> None:
    """other-067: ZeRO-3's flat CPU buffers are pinned; 'CUDA error: out of memory' there is the host's."""
    f = only_error(diagnose("deepspeed/other-067.log"))
    assert f.cause is not None and f.cause.id == "host-ram"
    assert f.cause.summary.startswith("The failing frame (_create_param_groups_fp16_flat_cpu_memory) was pinning host memory")
    assert remedy_ids(f)[0] == "training.offload-pin-memory-off"
    assert remedy(f, "training.offload-pin-memory-off").settings == {
        "zero_optimization.offload_param.pin_memory": "false",
        "zero_optimization.offload_optimizer.pin_memory": "false",
    }


def test_cuda_context_creation_failing_is_other_processes() -> None:
    """other-065: cutorch could not create its context: the GPU was full before the program ran."""
    f = only_error(diagnose_text(
        "THCudaCheck FAIL file=/tmp/luarocks_cutorch-scm-1-28/cutorch/init.c line=261 error=2 : out of memory\n"
    ))
    assert f.cause is not None and f.cause.id == "other-processes"
    assert f.cause.summary.startswith("Creating the CUDA context failed (file=/tmp/luarocks_cutorch-scm-1-28/cutorch/init.c)")
    assert remedy_ids(f) == ["gpu.free-other-processes"]


def test_old_thc_storage_failure_is_an_activation() -> None:
    """other-066: PyTorch 0.1's THCStorage allocating a tensor."""
    f = only_error(diagnose_text(
        "RuntimeError: cuda runtime error (2) : out of memory at /data/users/soumith/miniconda2/conda-bld/"
        "pytorch-0.1.5_1479441063232/work/torch/lib/THC/generic/THCStorage.cu:65\n"
    ))
    assert f.cause is not None and f.cause.id == "activation-peak"


_MISTRAL_ON_11GB = (
    "$ python -u -m vllm.entrypoints.openai.api_server --host 0.0.0.0 --model mistralai/Mistral-7B-v0.1 "
    "--dtype half --gpu-memory-utilization 0.8  --max-model-len 4096\n"
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB (GPU 0; 10.73 GiB total "
    "capacity; 9.85 GiB already allocated; 46.44 MiB free; 9.86 GiB reserved in total by PyTorch)\n"
)


def test_catalog_weights_larger_than_the_gpu_are_the_cause() -> None:
    """fresh-074: Mistral-7B in fp16 is 14.48 GB of weights (the catalog's 7.24e9 parameters × 2 B);
    the card has 10.73 GiB, so no utilization or context setting can help."""
    f = only_error(diagnose_text(_MISTRAL_ON_11GB))
    assert f.account is not None and f.account.get("weights") == 14480000000
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    # no online fp8: the version is unknown, and through 0.15 it creates the 16-bit weights before quantizing
    assert remedy_ids(f)[:2] == ["vllm.quantization-4bit", "vllm.tensor-parallel-size"]
    assert "vllm.quantization" not in remedy_ids(f)
    half = only_error(diagnose_text(_MISTRAL_ON_11GB.replace("--max-model-len 4096", "--max-model-len 4096 --tensor-parallel-size 2")))
    assert half.account is not None and half.account.get("weights") == 7240000000
    assert half.cause is not None and half.cause.id != "weights-exceed-device"


_TGI_WARMUP = (
    "ERROR warmup{max_input_length=Some(30000) max_prefill_tokens=31000 max_total_tokens=Some(32000) "
    "max_batch_size=None}:warmup: text_generation_router_v3::client: backends/v3/src/client/mod.rs:45: Server "
    "error: Not enough memory to handle 31000 prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n"
)


def test_tgi_prefill_stays_at_or_above_the_input_limit() -> None:
    """fresh-063: the warm-up span (router v3: TGI 2.x+, --max-input-tokens) states an input limit of
    30000; TGI's launcher rejects a prefill budget below it, so the halved prefill (15360) brings the
    input limit down with it."""
    f = only_error(diagnose_text(_TGI_WARMUP))
    assert f.phase == "warmup"
    first = f.remedies[0]
    assert first.id == "tgi.max-batch-prefill-tokens"
    assert first.flags == {"--max-batch-prefill-tokens": "15360", "--max-input-tokens": "15360"}


def test_tgi_warmup_failure_does_not_lower_the_memory_fraction() -> None:
    """other-019: 'Unable to warmup model' is the warm-up phase; a smaller --cuda-memory-fraction
    would leave the warm-up less, not more."""
    f = only_error(diagnose("tgi/other-019.log"))
    assert f.phase == "warmup"
    assert "tgi.cuda-memory-fraction" not in remedy_ids(f)


def test_rl_trainer_sharing_the_gpu_is_colocation() -> None:
    """fresh-053: ms-swift's rlhf trainer; 24.86 GiB of the GPU is outside the trainer's allocator:
    the colocated vLLM's pool, lowered with ms-swift's own argument."""
    log = (
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.63 GiB. GPU 3 has a total "
        "capacity of 79.11 GiB of which 2.61 GiB is free. Including non-PyTorch memory, this process has 0 bytes "
        "memory in use. Of the allocated memory 48.16 GiB is allocated by PyTorch, and 3.48 GiB is reserved by "
        "PyTorch but unallocated.\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/mnt/users/ms-swift/swift/cli/rlhf.py", line 5, in <module>\n'
        "[rank0]:     rlhf_main()\n"
    )
    f = only_error(diagnose_text(log))
    assert f.cause is not None and f.cause.id == "colocation"
    assert "outside the trainer's own allocator" in f.cause.summary
    assert remedy_ids(f)[0] == "rl.rollout-gpu-memory-utilization"
    assert list(f.remedies[0].settings) == ["--vllm_gpu_memory_utilization"]


def test_llamacpp_weights_without_layer_counts_point_at_ngl_without_a_number() -> None:
    """other-001: llama.cpp's weight buffer failed; no -ngl and no layer count in the log."""
    f = only_error(diagnose("llamacpp/other-001.log"))
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    first = f.remedies[0]
    assert (first.id, first.flags, first.confidence) == ("ggml.n-gpu-layers", {}, "low")
    assert "-ngl" in first.title


def test_ray_monitor_kill_gets_no_swap() -> None:
    """vllm-043: Ray's memory monitor kills workers at its own threshold; swap does not stop it."""
    f = only_error(diagnose("vllm/vllm-043.log"))
    assert f.rule.startswith("ray.memory-monitor")
    assert "host.add-swap" not in remedy_ids(f)


def test_vllm_kernel_warmup_after_the_pool_is_engine_headroom() -> None:
    """fresh-107: vLLM's DeepGEMM warm-up (compile_or_warm_up_model) runs after the KV pool was sized;
    its buffer found too little left outside the pool, as a serving allocation would."""
    p = "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815] "
    f = only_error(diagnose_text(
        f'{p}  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py", '
        f"line 262, in _warmup\n{p}{_TORCH_OOM}\n"
    ))
    assert (f.engine, f.phase) == ("vllm", "warmup")
    assert f.cause is not None and f.cause.id == "engine-headroom"


def test_tgi_warmup_sizing_its_pool_is_not_engine_headroom() -> None:
    """other-016: TGI's warmup() runs its prefill before it sizes the KV blocks: no pool to blame."""
    f = only_error(diagnose("tgi/other-016.log"))
    assert (f.engine, f.phase) == ("tgi", "warmup")
    assert f.cause is not None and f.cause.id != "engine-headroom"


def test_vllms_own_ray_workers_are_not_the_users_tasks() -> None:
    """vllm-043: Ray killed `RayWorkerVllm.__init__` (an actor vLLM creates per GPU): the user sets no
    num_cpus on it, so Ray's "request more CPUs per task" is not a remedy there."""
    f = only_error(diagnose("vllm/vllm-043.log"))
    assert f.figures["task_name"] == "RayWorkerVllm.__init__"
    assert "ray.reduce-parallelism" not in remedy_ids(f)


def test_the_utilization_raise_shows_its_margin() -> None:
    """vllm-016: the KV budget is -1.05 GiB on 8.00 GiB at 0.70: 0.70 + 1.05/8.00 = 0.831 -> 0.84, and
    the shortfall is a lower bound (one request's KV is unknown), so 0.02 more, said as such: 0.86."""
    f = only_error(diagnose("vllm/vllm-016.log"))
    r = remedy(f, "vllm.gpu-memory-utilization.raise-for-kv")
    assert "= 0.84, plus 0.02 for a few blocks: 0.86" in r.why
