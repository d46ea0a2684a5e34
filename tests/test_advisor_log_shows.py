"""A cause says what the log shows and no more (review D): the upstream wording of each message, and
what the summary and the remedies may claim from it."""

from __future__ import annotations

import oomdoctor
from oomdoctor.report import Finding
from tests.engines_util import diagnose_text, remedy

# torch MPSAllocator.mm's message (fresh-020): no phase, no frame, 6.04 GB of 6.77 GB held by MPS
MPS = (
    "MPS backend out of memory (MPS allocated: 6.04 GB, other allocations: 1.04 GB, max allowed: 6.77 GB). "
    "Tried to allocate 459.07 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper "
    "limit for memory allocations (may cause system failure)\n"
)


def _first(report: oomdoctor.Report) -> Finding:
    return report.findings[0]


def test_mps_near_its_limit_without_a_phase_reads_weights_and_says_it_is_a_reading() -> None:
    """fresh-020's message: no phase, MPS holding nearly all of its limit. Read as the weights (the
    usual case on a Mac, and the expert labels of fresh-020/-021/new-015), but the summary says the
    message does not show the holder, and no longer that no batch or allocator setting helps (review D
    row 22): the batch and the limit are named for the case where the work is the bulk."""
    f = _first(diagnose_text(MPS))
    assert f.phase == "unknown"
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    assert f.cause.summary == (
        "MPS holds 6.04 GiB and other allocations 1.04 GiB; with the 459.07 MiB requested that passes the MPS "
        "allocator's limit of 6.77 GiB (PYTORCH_MPS_HIGH_WATERMARK_RATIO × the recommended working set). The "
        "message does not say what holds the memory; outside training, a process that fills MPS's limit on a "
        "Mac is usually holding its model's weights (and any other models it keeps loaded), so a smaller model "
        "or unloading the others frees it. If the work itself is the bulk, a smaller batch or resolution, or a "
        "higher limit, lets it through."
    )
    ids = [r.id for r in f.remedies]
    assert ids[:2] == ["weights.smaller-model", "torch.mps-high-watermark"]
    # 1.7 x 7.53 GiB / 6.77 GiB = 1.890 needs 1.9, about 39 MiB over what failed; 5 % headroom: 2.0,
    # PyTorch's own bound (MPSAllocator.h default_high_watermark_upper_bound, allowed)
    assert remedy(f, "torch.mps-high-watermark").env == {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "2.0"}
    assert remedy(f, "weights.smaller-model").why == (
        "If the model's weights are the bulk of what MPS holds (the message does not say), a smaller or "
        "lower-bit model, or unloading the other models this process keeps loaded, frees it; batch and limit "
        "settings do not shrink weights."
    )
    ja = _first(oomdoctor.diagnose(MPS, lang="ja"))
    assert ja.cause is not None and ja.cause.summary.startswith("MPSが6.04 GiB、その他の割り当てが1.04 GiBを使っており")
    assert "メッセージは何がメモリを使っているかを示していません" in ja.cause.summary


def test_ray_memory_monitor_is_its_threshold_not_the_host_running_out() -> None:
    # raylet node_manager.cc's summary line (ray 2.9.0 raylet strings): no threshold in it
    f = _first(diagnose_text(
        "(raylet) [2025-12-07 09:57:19,206 E 393463 393463] (raylet) node_manager.cc:3277: 2 Workers (tasks / "
        "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: "
        "8289f87b, IP: 172.24.0.226) over the last time period.\n"
    ))
    assert f.cause is not None and f.cause.id == "host-ram"
    assert f.cause.summary == (
        "Ray's memory monitor killed the workers when the node's memory use passed its kill threshold "
        "(RAY_memory_usage_threshold, 0.95 of the node's memory by default): the monitor acts before the host "
        "itself runs out of RAM."
    )
    # the per-task line states the threshold it used
    g = _first(diagnose_text(
        "Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.5, ID: "
        "708c7baf966d) where the task (task ID: 0dab4ab45f6c, name=train_fn, pid=5512, memory used=24.31GB) was "
        "running was 30.52GB / 31.01GB (0.98412), which exceeds the memory usage threshold of 0.9. Ray killed "
        "this worker (ID: 79a553ea91fe) because it was the most recently scheduled task.\n"
    ))
    assert g.cause is not None and g.cause.summary.startswith(
        "Ray's memory monitor killed the workers when the node's memory use passed its kill threshold of 0.9 "
        "(RAY_memory_usage_threshold)"
    )


def test_failed_pinned_host_buffer_falls_back_and_sizes_the_ram() -> None:
    # ggml-cuda.cu ggml_cuda_host_malloc's wording; ggml_backend_cuda_host_buffer_type_alloc_buffer then
    # falls back to a CPU buffer
    f = _first(diagnose_text(
        "ggml_cuda_host_malloc: failed to allocate 335445.83 MiB of pinned memory: out of memory\n"
    ))
    assert f.severity == "warning"
    assert f.cause is not None and f.cause.summary == (
        "llama.cpp could not pin (page-lock) 327.58 GiB of host memory: pinning fails on the OS's and the "
        "driver's locked-memory limits, not only when RAM runs out, and llama.cpp then falls back to ordinary "
        "pageable memory, so this alone stops nothing. A host buffer this size still means the host needs "
        "about 327.58 GiB of RAM for what stays on the CPU."
    )


JAX_2019 = (
    "[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/python/local_client.cc:672] "
    "Execution of replica 0 failed: Resource exhausted: Out of memory while trying to allocate 5520758552 bytes.\n"
)


def test_jax_default_fraction_follows_the_jaxlib_that_wrote_the_log() -> None:
    f = _first(diagnose_text(JAX_2019))
    r = remedy(f, "xla.mem-fraction")
    assert r.env == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"} and r.confidence == "low"
    assert r.why == (
        "The log's wording (local_client.cc) is an early jaxlib's, which preallocates 0.9 of the GPU's free "
        "memory by default (0.75 only from jaxlib 0.4.14): 0.95 adds 5 points, little room. The GPU's size and "
        "the batch or input shape decide more."
    )
    # TF_FORCE_UNIFIED_MEMORY is known read by the PJRT clients, not by jaxlib's first client
    assert "xla.unified-memory" not in [x.id for x in f.remedies]
    # a stated jaxlib: 0.9 before 0.4.14, 0.75 from it
    msg = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 5520758552 bytes.\n"
    old = remedy(_first(diagnose_text("jaxlib==0.4.13\n" + msg)), "xla.mem-fraction")
    new = remedy(_first(diagnose_text("jaxlib==0.4.14\n" + msg)), "xla.mem-fraction")
    assert old.why == "JAX preallocates 0.9 of the GPU; the rest stays unused."
    assert new.why == "JAX preallocates 0.75 of the GPU; the rest stays unused."


def test_cuda_driver_error_says_no_more_than_the_message() -> None:
    f = _first(diagnose_text("RuntimeError: CUDA driver error: out of memory\n"))
    assert f.cause is not None and f.cause.summary == (
        "A CUDA driver-API call ran out of memory (\"CUDA driver error\"): in PyTorch's allocator that is the "
        "expandable segments' virtual-memory path (cuMemAddressReserve / cuMemMap). The message gives no "
        "figures: it shows neither whether the GPU was full nor what held it."
    )
    assert [r.id for r in f.remedies][:2] == ["torch.expandable-segments-off", "ask.driver-facts"]
    ask = remedy(f, "ask.driver-facts")
    assert ask.title == "If that does not help, send the GPU, the model and nvidia-smi: the message gives no figures"
    assert "a real shortage fails with PyTorch's ordinary out-of-memory message, which gives the figures" in ask.why


def test_sglang_low_fraction_may_be_a_shared_gpu() -> None:
    msg = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
           "self.server_args.mem_fraction_static={}\n")
    r = remedy(_first(diagnose_text(msg.format("0.2"))), "sglang.mem-fraction-static.raise")
    assert r.flags == {"--mem-fraction-static": "0.88"}
    assert r.why.endswith(
        "A fraction this low is often set on purpose, to leave the GPU to another tenant (a colocated trainer "
        "or engine, a shared card): if so, the default takes that memory from it; check what else runs on the "
        "GPU, and raise only as far as it allows."
    )
    # 0.7 is a tuning, not a share left to someone else
    r7 = remedy(_first(diagnose_text(msg.format("0.7"))), "sglang.mem-fraction-static.raise")
    assert "on purpose" not in r7.why
