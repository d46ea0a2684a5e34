"""The program's shape decides the knobs (review D): TensorRT-LLM's PyTorch backend (no engine to
rebuild) and Triton's TensorRT-LLM backend (config.pbtxt parameters); a training launch (no
from_pretrained placement knobs); one image per request (no batch to halve)."""

from __future__ import annotations

import oomdoctor
from oomdoctor.report import Finding

#: the PyTorch backend's executor report, as trtllm-serve 1.0 prints it (its component table lists
#: the PyTorch executor's Sampler and Drafter)
PYTORCH_BACKEND = b"""[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] Failed to initialize executor on rank 1: Executor creation failed due to insufficient GPU memory.

The following component could not be created: KV cache
Total GPU memory (GiB): 140.06
Free GPU memory before component creation attempt (GiB): 108.86

Previously created components and free GPU memory before/after creation (GiB):
Model: 139.55 / 110.70
Sampler: 110.70 / 110.70
Initial KV cache (temporary for KV cache size estimation): 110.70 / 110.33
Drafter: 110.33 / 110.33
"""

#: Triton's model table: the tensorrtllm backend failing to create the model instance
TRITON = b"""| tensorrt_llm | 1       | UNAVAILABLE: Internal: unexpected error when creating modelInstanceState: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112) |
|              |         | 1       0x7f387e888d85 /opt/tritonserver/backends/tensorrtllm/libtriton_tensorrtllm.so(+0x35d85) [0x7f387e888d85] |
"""

#: the same error from a TensorRT engine run outside Triton (examples/run.py)
ENGINE = b"""RuntimeError: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/home/jenkins/agent/workspace/LLM/main/L0_PostMerge/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)
"""


def _error(log: bytes) -> Finding:
    report = oomdoctor.diagnose(log, source="t.log")
    errors = [f for f in report.findings if f.severity == "error"]
    assert len(errors) == 1
    return errors[0]


def _ids(f: Finding) -> list[str]:
    return [r.id for r in f.remedies]


def test_pytorch_backend_speaks_run_time_arguments_not_an_engine_rebuild() -> None:
    f = _error(PYTORCH_BACKEND)
    kv, batch = f.remedies[0], f.remedies[1]
    assert kv.id == "trtllm.kv-cache-free-gpu-mem-fraction"
    assert kv.flags == {"--kv_cache_free_gpu_memory_fraction": "0.80"}
    assert kv.settings == {"KvCacheConfig.free_gpu_memory_fraction": "0.80"}  # no Triton parameter
    assert "max_tokens" in kv.why
    # 2048 is trtllm-serve's default max_batch_size: half, as a run-time flag and LLM(...) keyword
    assert batch.id == "trtllm.max-batch-size"
    assert batch.flags == {"--max_batch_size": "1024"}
    assert batch.settings == {"max_batch_size": "1024"}
    assert [c.text for c in batch.code if c.language == "python"] == ["LLM(..., max_batch_size=1024)"]
    for r in f.remedies:
        assert "trtllm-build" not in r.why and not any("trtllm-build" in k for k in r.settings), r.id
        assert "rebuild" not in r.title.lower()
    tokens = next(r for r in f.remedies if r.id == "trtllm.max-num-tokens")
    assert tokens.flags == {"--max_num_tokens": "4096"}


def test_pytorch_backend_cause_says_the_estimate_was_off() -> None:
    f = _error(PYTORCH_BACKEND)
    assert f.cause is not None and f.cause.id == "kv-cache-exceeds-free"
    assert "108.86 GiB" in f.cause.summary and "140.06 GiB" in f.cause.summary
    assert "estimated" in f.cause.summary and "larger than the memory" not in f.cause.summary


def test_triton_speaks_config_pbtxt_and_rebuilds_only() -> None:
    f = _error(TRITON)
    kv = f.remedies[0]
    assert kv.id == "trtllm.kv-cache-free-gpu-mem-fraction"
    assert kv.flags == {}
    assert kv.settings == {"kv_cache_free_gpu_mem_fraction (Triton config.pbtxt)": "0.80"}
    for r in f.remedies:
        assert not r.flags, r.id  # no trtllm-serve flag for a Triton deployment
        assert not any(c.language == "python" for c in r.code), r.id
    tokens = next(r for r in f.remedies if r.id == "trtllm.max-num-tokens")
    assert tokens.settings == {"max_num_tokens (trtllm-build)": "4096"}
    assert tokens.title == "Rebuild the engine with max_num_tokens 4096"


def test_triton_instance_cause_names_the_phase_not_the_pool() -> None:
    f = _error(TRITON)
    assert f.cause is not None and f.cause.id == "engine-headroom"
    assert f.cause.summary.startswith("TensorRT-LLM's cudaMallocAsync of a runtime buffer failed while the model instance")
    assert "KV-cache pool, the runtime (activation) buffers or the weights" in f.cause.summary


def test_an_engine_run_outside_triton_keeps_every_name() -> None:
    f = _error(ENGINE)
    kv = f.remedies[0]
    assert kv.flags == {"--kv_cache_free_gpu_memory_fraction": "0.80"}
    assert "kv_cache_free_gpu_mem_fraction (Triton config.pbtxt)" in kv.settings
    assert f.cause is not None and "model instance" not in f.cause.summary


#: a FastChat-style FSDP launch killed while loading the checkpoint
FSDP_ONE_RANK = b"""torchrun --nnodes=1 --nproc_per_node=1 --master_port=20001 fastchat/train/train_mem.py \\
    --model_name_or_path /data/llama-7b \\
    --fp16 True \\
    --per_device_train_batch_size 1 \\
    --fsdp "full_shard auto_wrap" \\
    --fsdp_transformer_layer_cls_to_wrap 'LlamaDecoderLayer'

Loading checkpoint shards:   0%|          | 0/2 [00:00<?, ?it/s]
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 27657) of binary: /usr/bin/python3
"""


def test_training_load_gets_no_inference_placement_knobs() -> None:
    f = _error(FSDP_ONE_RANK)
    r = next(r for r in f.remedies if r.id == "host.low-cpu-mem-usage")
    assert r.settings == {"from_pretrained": "low_cpu_mem_usage=True"}
    assert [c.text for c in r.code] == ["AutoModelForCausalLM.from_pretrained(..., low_cpu_mem_usage=True)"]
    # one rank: FSDP shards nothing, full fine-tuning is the next wall
    assert "--nproc_per_node=1" in r.why and "16 bytes per parameter" in r.why
    assert "cpu_ram_efficient_loading" not in r.why


def test_fsdp_on_several_ranks_names_cpu_ram_efficient_loading() -> None:
    f = _error(FSDP_ONE_RANK.replace(b"--nproc_per_node=1", b"--nproc_per_node=4"))
    r = next(r for r in f.remedies if r.id == "host.low-cpu-mem-usage")
    assert "cpu_ram_efficient_loading: true" in r.why and "sync_module_states: true" in r.why


def test_a_plain_load_keeps_device_map() -> None:
    log = FSDP_ONE_RANK.split(b"\n\n", 1)[1].replace(b"Loading", b"python run.py\nLoading")
    f = _error(log)
    r = next(r for r in f.remedies if r.id == "host.low-cpu-mem-usage")
    assert 'device_map="auto"' in r.settings["from_pretrained"]


#: an image interrogator's RPC handler: one image per request
ONE_IMAGE = b"""Interrogate Request!
Unloading interrogator blip2-opt-6.7b
Traceback (most recent call last):
  File "E:\\\\tagger\\\\interrogator_rpc\\\\main.py", line 142, in InterrogateImage
    tag_ret = interrogate_image(network_conf.interrogator_network, image_obj)
  File "E:\\\\tagger\\\\interrogator_rpc\\\\main.py", line 57, in interrogate_image
    interg.stop()
RuntimeError: CUDA error: out of memory
"""


def test_one_image_per_request_gets_a_smaller_model_not_a_smaller_batch() -> None:
    f = _error(ONE_IMAGE)
    assert _ids(f) == ["ask.runtime-call", "weights.smaller-model"]
    assert "one item per request" in f.remedies[1].why


def test_a_bare_runtime_oom_elsewhere_still_halves_the_batch() -> None:
    f = _error(b"RuntimeError: CUDA error: out of memory\n")
    assert _ids(f) == ["ask.runtime-call", "torch.reduce-batch"]
