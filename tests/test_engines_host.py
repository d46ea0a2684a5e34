"""The host: kernel OOM killer, cgroups, exit 137 / OOMKilled, Ray, plain Killed, /dev/shm."""

from __future__ import annotations

import pytest

from tests.engines_util import diagnose, diagnose_text, errors, only_error


def test_corpus_dmesg_summary_and_kill_line_are_one_finding() -> None:
    f = only_error(diagnose("transformers/other-081.log"))
    assert (f.rule, f.kind) == ("host.oom-kill-summary", "host.oom-killed")
    assert {k: f.figures[k] for k in ("pid", "total_vm_bytes", "anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes")} == {
        "pid": 576419,
        "total_vm_bytes": 80405983232,
        "anon_rss_bytes": 55703818240,
        "file_rss_bytes": 2691072,
        "shmem_rss_bytes": 0,
    }


def test_corpus_kubernetes_exit_137_during_model_initialize() -> None:
    f = only_error(diagnose("other/other-083.log"))
    assert (f.kind, f.figures, f.phase) == ("host.oom-killed", {"exit_code": 137}, "weights-load")


@pytest.mark.parametrize("rel", ["ray/other-045.log", "vllm/vllm-044.log"])
def test_corpus_ray_memory_monitor(rel: str) -> None:
    f = only_error(diagnose(rel))
    assert (f.rule, f.kind, f.figures) == ("ray.memory-monitor-killed", "host.oom-killed", {"workers_killed": 2})


def test_corpus_dataloader_bus_error() -> None:
    f = only_error(diagnose("pytorch/other-049.log"))
    assert (f.kind, f.phase) == ("host.shm-insufficient", "training")


def test_cgroup_kill() -> None:
    f = only_error(diagnose("other/synthetic-dmesg-cgroup.log"))
    assert f.figures["constraint"] == "CONSTRAINT_MEMCG"
    assert f.figures["anon_rss_bytes"] == 33000000 * 1024


def test_describe_pod_oomkilled_is_one_finding() -> None:
    f = only_error(diagnose("other/synthetic-k8s-describe-oomkilled.log"))
    assert f.figures == {"reason": "OOMKilled", "exit_code": 137}


def test_plain_killed_while_loading_shards() -> None:
    f = only_error(diagnose("other/synthetic-shell-killed-loading.log"))
    assert (f.rule, f.phase) == ("host.shell-killed", "weights-load")


@pytest.mark.parametrize(
    "bar",
    [
        "Loading checkpoint shards:  75%|#######   | 3/4 [00:15<00:05,  5.00s/it]",
        "Loading checkpoint shards:  75%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588   | 3/4 [00:15<00:05,  5.00s/it]",
    ],
)
@pytest.mark.parametrize("sep", ["", "\r"])
def test_killed_behind_a_progress_bar_redrawn_with_carriage_returns(bar: str, sep: str) -> None:
    # tqdm redraws its bar after "\r" and the shell's "Killed" lands on the bar's line, after it
    # or after one more "\r": both are the same physical line, read as segments
    text = "Loading checkpoint shards:  50%|#####     | 2/4 [00:10<00:10,  5.00s/it]\r" + bar + sep + "Killed\n"
    f = only_error(diagnose_text(text))
    assert (f.rule, f.location.line) == ("host.shell-killed", 1)


def test_killed_on_the_next_line_is_located_there() -> None:
    f = only_error(diagnose_text("step 1 loss 2.0\nKilled\n"))
    assert (f.rule, f.location.line) == ("host.shell-killed", 2)


def test_ray_task_killed_figures() -> None:
    f = only_error(diagnose("ray/synthetic-task-killed.log"))
    assert f.figures["memory_usage_fraction"] == 0.984283
    assert f.figures["memory_usage_threshold"] == 0.95


def test_nccl_shm_segment() -> None:
    f = only_error(diagnose("pytorch/synthetic-nccl-shm.log"))
    assert (f.kind, f.figures["segment_bytes"]) == ("host.shm-insufficient", 9637888)


@pytest.mark.parametrize(
    "text",
    [
        "zsh: terminated  ./run.sh\n",
        "INFO 10-01 10:00:00 Loading took 137.5 seconds\n",
        "RuntimeError: DataLoader worker (pid(s) 1234) exited unexpectedly\n",
        "[12.3] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0\n",
    ],
)
def test_near_misses(text: str) -> None:
    assert not errors(diagnose_text(text))


def test_a_small_weight_buffer_failing_on_the_host_gets_swap() -> None:
    """other-004 (ollama on Windows, mmap off): one 417.66 MiB CPU buffer of the weights found no host
    memory while loading: the host is full, so more swap (the page file on Windows), worded, not asked."""
    from tests.engines_util import diagnose, only_error

    f = only_error(diagnose("ollama/other-004.log"))
    assert f.phase == "weights-load" and f.cause is not None and f.cause.id == "host-ram"
    first = f.remedies[0]
    assert first.id == "host.add-swap" and list(first.settings) == ["swap size"]
    assert "417.66 MiB" in first.why
