"""Failure classes first met on logs the rules were not tuned on, each written from the upstream
wording (shared/research/upstream-messages.md) with figures of our own: the phase from the files a
traceback runs through, vLLM's dead-engine errors, weight loading interleaved after another
worker's OOM, llama.cpp's server running out of KV space, XLA's wrapped wording, and a PyTorch
OOM inside an engine named only by its package's paths."""

from __future__ import annotations

from tests.engines_util import diagnose_text, only_error

_TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 1.20 GiB is free."
)


def _traceback(*paths_funcs: tuple[str, str]) -> str:
    frames = [f'  File "{path}", line {10 + i}, in {func}' for i, (path, func) in enumerate(paths_funcs)]
    return "\n".join(["Traceback (most recent call last):", *frames, _TORCH_OOM, ""])


def test_training_phase_from_the_files_of_deepspeed_and_torch_optim() -> None:
    # no frame name says training ("step", "wrapper"), and no source line: only the files do
    text = _traceback(
        ("/workspace/run.py", "main"),
        ("/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/zero/stage3.py", "step"),
        ("/usr/local/lib/python3.10/dist-packages/torch/optim/optimizer.py", "wrapper"),
        ("/usr/local/lib/python3.10/dist-packages/torch/optim/adamw.py", "step"),
    )
    f = only_error(diagnose_text(text))
    assert (f.kind, f.phase) == ("torch.cuda-oom", "training")


def test_training_phase_from_trl_and_accelerate_files() -> None:
    text = _traceback(
        ("/opt/conda/lib/python3.11/site-packages/trl/trainer/sft_trainer.py", "compute_loss_func"),
        ("/opt/conda/lib/python3.11/site-packages/accelerate/accelerator.py", "backward_step"),
    )
    assert only_error(diagnose_text(text)).phase == "training"


def test_accelerate_hooks_are_not_training() -> None:
    # accelerate's hooks also dispatch a model for generation: that file says nothing
    text = _traceback(
        ("/opt/conda/lib/python3.11/site-packages/accelerate/hooks.py", "new_forward"),
        ("/opt/conda/lib/python3.11/site-packages/torch/nn/modules/linear.py", "forward_impl"),
    )
    assert only_error(diagnose_text(text)).phase == "unknown"


def test_weights_load_stays_first_when_zero_init_loads_the_model() -> None:
    text = _traceback(
        ("/opt/conda/lib/python3.11/site-packages/transformers/modeling_utils.py", "from_pretrained"),
        ("/opt/conda/lib/python3.11/site-packages/deepspeed/runtime/zero/partition_parameters.py", "wrapper"),
    )
    assert only_error(diagnose_text(text)).phase == "weights-load"


def test_vllm_dead_engine_quoting_a_hip_oom_is_inference_with_its_figures() -> None:
    text = (
        "Engine loop is not running. Inspect the stacktrace to find the original error: OutOfMemoryError("
        "'HIP out of memory. Tried to allocate 2.25 GiB. GPU 0 has a total capacity of 191.98 GiB of which "
        "1.05 GiB is free. Of the allocated memory 180.12 GiB is allocated by PyTorch, and 3.40 GiB is "
        "reserved by PyTorch but unallocated.')\n"
    )
    f = only_error(diagnose_text(text))
    assert (f.kind, f.phase) == ("torch.hip-oom", "inference")
    assert f.figures["requested_bytes"] == round(2.25 * 2**30)
    assert f.figures["free_bytes"] == round(1.05 * 2**30)


def test_dead_engine_error_after_the_oom_says_inference() -> None:
    text = (
        f"ERROR 05-01 10:00:00 [engine.py:160] {_TORCH_OOM}\n"
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.\n"
    )
    assert only_error(diagnose_text(text)).phase == "inference"


def test_client_retry_lines_right_after_the_oom_say_inference() -> None:
    text = f"{_TORCH_OOM}\nRetry attempt 1\nRetrying now...\n"
    assert only_error(diagnose_text(text)).phase == "inference"
    assert only_error(diagnose_text(f"{_TORCH_OOM}\n")).phase == "unknown"


def test_weight_loading_of_other_workers_after_the_copies_of_the_oom() -> None:
    # three workers print the same OOM, then the first line of the others' weight loading: the
    # copies do not use up the few lines in which that progress still names the phase
    lines = [
        f"(Worker_TP{i} pid=22{i}) ERROR 05-02 10:00:01 [multiproc_executor.py:470] "
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU {i} has a total "
        f"capacity of 23.53 GiB of which 512.00 MiB is free."
        for i in (1, 2, 3)
    ]
    lines += [
        "(Worker_TP1 pid=221) ERROR 05-02 10:00:01 [multiproc_executor.py:470] ",
        "(Worker_TP2 pid=222) ERROR 05-02 10:00:01 [multiproc_executor.py:470] ",
        "(Worker_TP0 pid=220) Loading safetensors checkpoint shards:   0% Completed | 0/8 [00:00<?, ?it/s]",
    ]
    f = only_error(diagnose_text("\n".join(lines) + "\n"))
    assert (f.phase, f.occurrences) == ("weights-load", 3)
    far = lines[:1] + [f"(Worker_TP1 pid=221) INFO 05-02 10:00:0{i} [x.py:1] step {i}" for i in range(6)] + lines[-1:]
    assert only_error(diagnose_text("\n".join(far) + "\n")).phase == "unknown"


def test_llama_server_kv_space_retries_then_fails() -> None:
    retries = [
        f"update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = {n}"
        for n in (256, 128, 1)
    ]
    failed = "update_slots : failed to decode the batch, n_batch = 1, ret = 1"
    r = diagnose_text("\n".join([*retries, failed]) + "\n")
    err = only_error(r)
    assert (err.kind, err.phase, err.figures) == ("ggml.alloc-failed", "inference", {"n_batch": 1, "ret": 1})
    warn = [f for f in r.findings if f.severity == "warning"]
    assert [(f.kind, f.occurrences) for f in warn] == [("ggml.alloc-failed", 3)]
    # retries that got through: a warning only
    r = diagnose_text("\n".join(retries[:2]) + "\nslot 0: released (4096 tokens in cache)\n")
    assert [f.severity for f in r.findings] == ["warning"]


def test_xla_resource_exhausted_wrapped_after_out() -> None:
    f = only_error(diagnose_text("Resource exhausted: Out \nof memory while trying to allocate 5520758552 bytes.\n"))
    assert (f.kind, f.figures) == ("xla.resource-exhausted", {"requested_bytes": 5520758552})


def test_generic_extractor_reads_a_bare_byte_count() -> None:
    f = only_error(diagnose_text("FooRuntimeError: out of device memory: could not allocate 5520758552 bytes\n"))
    assert (f.kind, f.figures) == ("generic.oom", {"requested_bytes": 5520758552})


def test_generic_extractor_reads_a_headless_legacy_torch_message() -> None:
    # fresh-089: PyTorch <= 2.0's figures pasted without "CUDA out of memory"
    f = only_error(diagnose_text(
        "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; "
        "2.88 MiB free; 1.25 GiB reserved in total by PyTorch)\n"
    ))
    assert f.kind == "generic.oom"
    assert f.figures == {
        "requested_bytes": 20971520, "total_bytes": 2104533975, "allocated_bytes": 1331439862,
        "free_bytes": 3019899, "reserved_bytes": 1342177280, "gpu_index": 0,
    }


def test_torch_oom_inside_trtllm_named_by_windows_paths() -> None:
    text = _traceback(
        (r"C:\envs\x\lib\site-packages\tensorrt_llm\_torch\pyexecutor\model_engine.py", "forward"),
    )
    f = only_error(diagnose_text(text))
    assert (f.kind, f.engine) == ("torch.cuda-oom", "tensorrt-llm")


def test_image_generation_requests_say_inference() -> None:
    # ComfyUI's "got prompt" before the failure, InvokeAI's session summary right after it
    assert only_error(diagnose_text(f"got prompt\n{_TORCH_OOM}\n")).phase == "inference"
    text = f"{_TORCH_OOM}\n\n[2025-02-10 21:49:50,346]::[InvokeAI]::INFO --> Graph stats: 18f998d3\n"
    assert only_error(diagnose_text(text)).phase == "inference"
