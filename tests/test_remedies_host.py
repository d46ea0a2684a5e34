"""Host remedies: limits from anon-rss, shm, NCCL, Ray threshold, vLLM host-memory levers."""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, only_error, remedy, remedy_ids


def test_global_oom_is_not_a_container_limit() -> None:
    """constraint=CONSTRAINT_NONE: the host ran out, no limit to raise; swap sized from anon + file + shmem."""
    f = only_error(diagnose("transformers/other-081.log"))
    assert f.cause is not None and f.cause.id == "host-ram"
    assert "host.container-memory-limit" not in remedy_ids(f)
    # (54398260 + 2628 + 0) kB = 51.88 GiB -> at least 52 GiB
    assert remedy(f, "host.add-swap").settings == {"swap size": "at least 52 GiB"}
    # the kernel's line alone does not show Hugging Face loading a model: no from_pretrained settings
    assert "host.low-cpu-mem-usage" not in remedy_ids(f)
    assert remedy_ids(f)[0] == "host.add-swap"


def test_from_pretrained_settings_need_hugging_face_loading_in_the_log() -> None:
    kill = ("[856341.770960] Out of memory: Killed process 410126 (python) total-vm:79905000kB, "
            "anon-rss:22957108kB, file-rss:72036kB, shmem-rss:15143164kB, UID:1000 pgtables:78032kB oom_score_adj:0\n")
    import oomdoctor

    bare = oomdoctor.diagnose(kill).findings[0]
    assert "host.low-cpu-mem-usage" not in remedy_ids(bare)
    loading = oomdoctor.diagnose("Distributed environment: MULTI_GPU  Backend: nccl\n" + kill).findings[0]
    assert "host.low-cpu-mem-usage" in remedy_ids(loading)  # accelerate's banner: a from_pretrained user


def test_limit_from_resident_size() -> None:
    """A cgroup OOM: the limit is the remedy, sized from anon + file + shmem rss."""
    import oomdoctor

    log = ("Dec 02 10:00:00 gpu-node kernel: Memory cgroup out of memory: Killed process 4242 (python3) "
           "total-vm:33554432kB, anon-rss:16777216kB, file-rss:1048576kB, shmem-rss:1048576kB, UID:0\n")
    f = oomdoctor.diagnose(log).findings[0]
    assert f.cause is not None and f.cause.id == "container-limit"
    # (16777216 + 1048576 + 1048576) kB = 18 GiB × 1.25 = 22.5 -> 23 GiB
    r = remedy(f, "host.container-memory-limit")
    assert r.flags == {"--memory": "23g"} and r.settings == {"resources.limits.memory": "23Gi"}


def test_shm_remedies() -> None:
    f = only_error(diagnose("pytorch/other-049.log"))
    assert f.remedies[0].flags == {"--shm-size": "1g"}
    g = only_error(diagnose("pytorch/synthetic-nccl-shm.log"))
    assert remedy(g, "host.nccl-shm-disable").env == {"NCCL_SHM_DISABLE": "1"}


def test_ray_kill_means_fewer_tasks_first() -> None:
    """Ray's message advises more CPUs per task; raising the kill threshold hands the kill to the
    kernel's OOM killer, so the host-ram cause withholds it."""
    f = only_error(diagnose("ray/other-045.log"))
    assert f.cause is not None and f.cause.id == "host-ram"
    assert f.remedies[0].id == "ray.reduce-parallelism"
    assert f.remedies[0].settings["num_cpus"].startswith("2 (or more)")
    assert "ray.memory-usage-threshold" not in [r.id for r in f.remedies]


def test_ray_threshold() -> None:
    f = only_error(diagnose("ray/other-045.log"))
    r = calculator("ray.memory-usage-threshold")(AdviceInput(f, Context(engine="ray")))
    assert r is not None and r.env == {"RAY_memory_usage_threshold": "0.98"}  # usage 0.950744 < 0.98


def test_no_ray_threshold_below_the_usage_reached() -> None:
    """The node reached 0.984283: a 0.98 threshold would kill the task again."""
    f = only_error(diagnose("ray/synthetic-task-killed.log"))
    assert "ray.memory-usage-threshold" not in [r.id for r in f.remedies]


def _host_finding(ctx: Context) -> AdviceInput:
    f = Finding(
        rule="host.oom-killed-process", kind="host.oom-killed", engine="host", severity="error", title="t",
        message="m", location=Location(line=1, end_line=1),
    )
    return AdviceInput(f, ctx)


def test_vllm_levers_only_in_vllm_logs() -> None:
    assert calculator("host.vllm-swap-space")(_host_finding(Context(engine="sglang"))) is None
    r = calculator("host.vllm-swap-space")(_host_finding(Context(engine="vllm", engine_version="0.8.5",
                                                                 tensor_parallel_size=2)))
    assert r is not None and r.flags == {"--swap-space": "0"} and r.saves_bytes == 8 * 2**30
    # no version: the current release, which has no --swap-space (flag_exists, one gate for all)
    assert calculator("host.vllm-swap-space")(_host_finding(Context(engine="vllm", tensor_parallel_size=2))) is None
    ctx = Context(engine="vllm", launch_args={"cpu_offload_gb": "16"})
    r2 = calculator("host.vllm-cpu-offload-gb")(_host_finding(ctx))
    assert r2 is not None and r2.flags == {"--cpu-offload-gb": "8"}


def test_host_oom_never_suggests_swap_space_to_a_vllm_without_the_flag() -> None:
    """--swap-space was removed in vLLM 0.18.0: both swap-space calculators share that gate."""
    import oomdoctor

    kill = "Out of memory: Killed process 4242 (python3) total-vm:80000000kB, anon-rss:60000000kB, file-rss:0kB, shmem-rss:0kB\n"
    old = oomdoctor.diagnose("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.10.1) with config: model='m'\n" + kill)
    new = oomdoctor.diagnose("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.19.0) with config: model='m'\n" + kill)
    assert "host.vllm-swap-space" in [r.id for r in old.findings[0].remedies]
    assert "host.vllm-swap-space" not in [r.id for r in new.findings[0].remedies]


def test_a_stated_kubernetes_limit_is_raised_from_itself() -> None:
    """kubectl describe: Limits: memory 16Gi (the 8Gi request is not the limit); 16Gi × 1.25 = 20Gi."""
    f = only_error(diagnose("other/synthetic-k8s-describe-oomkilled.log"))
    r = remedy(f, "host.container-memory-limit")
    assert r.settings == {"resources.limits.memory": "20Gi"} and r.flags == {"--memory": "20g"}
    g = only_error(diagnose("other/synthetic-k8s-yaml-decimal-limit.log"))
    # 24G is decimal: 24 × 10^9 × 1.25 = 30G; docker's g is GiB: 30 × 10^9 / 2^30 = 27.94 -> 28g
    assert remedy(g, "host.container-memory-limit").settings == {"resources.limits.memory": "30G"}


def test_a_limit_line_outside_a_limits_block_is_not_the_limit() -> None:
    import oomdoctor

    log = "    Requests:\n      memory:  8Gi\n    Last State:     Terminated\n      Reason:       OOMKilled\n"
    report = oomdoctor.diagnose(log)
    assert "memory_limit_bytes" not in report.context.extra
    r = remedy(report.findings[0], "host.container-memory-limit")
    assert r.settings == {"resources.limits.memory": "2 × the current limit"}


def test_host_oom_in_a_program_without_the_gpu_asks_for_the_gpu_first() -> None:
    """other-080: bitsandbytes loaded its CPU-only library, then the host killed the loader: the model
    went into host RAM whole. Making the GPU visible comes before swap; a GPU-less log gets no ask."""
    f = only_error(diagnose("transformers/other-080.log"))
    assert f.cause is not None and f.cause.id == "host-ram"
    assert f.cause.summary.startswith(
        'The host ran out of RAM, and the log says the program runs without the GPU ("bitsandbytes was compiled'
        ' without GPU support")'
    )
    ask = remedy(f, "ask.gpu-visible")
    assert remedy_ids(f)[:2] == ["ask.gpu-visible", "host.add-swap"]
    assert [s.command for s in ask.run] == [
        "nvidia-smi; python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())'"
    ]
    assert "ask.gpu-visible" not in remedy_ids(only_error(diagnose("transformers/other-081.log")))


def test_one_host_allocation_beyond_most_machines_ram_is_the_request() -> None:
    """fresh-010's line: 108.79 GiB in one CPU allocation is a wrong size (or CPU work meant for the
    GPU), not a host to grow: said so, and no swap. 2 GiB failing keeps the plain summary."""
    from tests.engines_util import diagnose_text

    line = ("RuntimeError: [enforce fail at alloc_cpu.cpp:73] . DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate {} bytes. Error code 12 (Cannot allocate memory)\n")
    big = only_error(diagnose_text(line.format(116813856768)))
    assert big.cause is not None and big.cause.id == "host-ram"
    assert big.cause.summary.startswith("One host allocation of 108.79 GiB failed: a single tensor larger than")
    assert "host.add-swap" not in remedy_ids(big)
    small = only_error(diagnose_text(line.format(2 * 2**30)))
    assert small.cause is not None and not small.cause.summary.startswith("One host allocation")


def test_a_llama_converter_killed_for_host_ram_is_sized_by_its_parameters() -> None:
    """fresh-097: pyllama's converter with ``--model_size 65B`` killed by the shell: the converter holds
    the whole 16-bit checkpoint in RAM (transformers' convert_llama_weights_to_hf.py says so), so RAM +
    swap must reach 65 × 10⁹ × 2 bytes = 121.07 GiB -> 122 GiB. The reporter's 64 GB RAM + 70 GB swap
    worked. A kill with no model size stays unsized."""
    from tests.engines_util import diagnose_text

    f = only_error(diagnose("other/fresh-097.log"))
    swap = remedy(f, "host.add-swap")
    assert remedy_ids(f)[0] == "host.add-swap"
    assert swap.settings == {"swap size": "RAM + swap of at least 122 GiB together"}
    assert swap.why.startswith(
        "The converter loads the whole 65 B-parameter checkpoint into RAM at once: 65 × 10⁹ parameters × 2 bytes"
        " (16-bit) = 121.07 GiB."
    )
    plain = only_error(diagnose_text("$ python3 convert.py --out ./hf\n[1]    16261 killed     python3 convert.py\n"))
    assert remedy(plain, "host.add-swap").settings == {
        "swap size": "at least the peak resident size of the job (not in the log)"
    }
