"""Recovered failures are warnings: an allocation that failed and was retried another way, after
which the program went on (design point 5).

Per engine, the wording that says so is a rule of severity warning with its own examples (vLLM's
preemption, SGLang's retraction, llama.cpp's smaller-batch retry and ggml's pinned-memory fallback, TGI's
prefill reduction, Lightning's batch-size finder, the fallback's "skipping/retrying/falling back"
lines); these tests cover the one that spans lines: a failure logged in full, then a line saying
the program recovered from it (fairseq 0.12.2 fairseq/trainer.py, train_step and valid_step).
"""

from __future__ import annotations

import oomdoctor
from oomdoctor.rulepack import default_pack

STEP = (
    "2024-05-01 10:00:01 | INFO | train_inner | epoch 001:    100 / 1000 loss=9.812, ppl=898.9, wps=10234, "
    "num_updates=100, lr=0.0001\n"
)
OOM = (
    "2024-05-01 10:00:02 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA out of memory. "
    "Tried to allocate 1.53 GiB (GPU 0; 23.69 GiB total capacity; 20.12 GiB already allocated; 1.10 GiB free; "
    "21.90 GiB reserved in total by PyTorch)\n"
)
SUMMARY = (
    "2024-05-01 10:00:02 | WARNING | fairseq.trainer | |==================================================|\n"
    "|                  PyTorch CUDA memory summary, device ID 0                 |\n"
    "|            CUDA OOMs: 1            |        cudaMalloc retries: 1         |\n"
    "| Allocated memory      |   20602 MB |   21889 MB |  123456 MB |  102854 MB |\n"
)
RECOVER = "2024-05-01 10:00:03 | WARNING | fairseq.trainer | attempting to recover from OOM in forward/backward pass\n"
FATAL = "2024-05-01 10:00:03 | ERROR | fairseq.trainer | OOM during optimization, irrecoverable\n"


def _findings(log: str) -> list[tuple[str, str]]:
    return [(f.kind, f.severity) for f in oomdoctor.diagnose(log.encode()).findings]


def test_a_failure_the_program_recovered_from_is_a_warning_with_its_figures() -> None:
    report = oomdoctor.diagnose((STEP + OOM + SUMMARY + RECOVER + STEP).encode())
    torch_oom = [f for f in report.findings if f.kind.startswith("torch.")]
    assert [(f.severity, f.figures["requested_bytes"]) for f in torch_oom] == [("warning", 1642824991)]
    assert report.summary.errors == 0


def test_the_same_failure_without_the_recovery_line_is_an_error() -> None:
    assert ("torch.cuda-oom", "error") in _findings(STEP + OOM + SUMMARY)


def test_a_fatal_line_after_the_failure_keeps_it_an_error() -> None:
    found = _findings(STEP + OOM + SUMMARY + FATAL)
    assert ("torch.cuda-oom", "error") in found
    assert all(sev == "error" for _, sev in found)


def test_a_recovery_line_of_another_rank_does_not_recover_this_ranks_failure() -> None:
    log = "[rank1]: " + OOM.split("| fairseq.trainer | ", 1)[1] + "[rank0]: " + RECOVER.split("| fairseq.trainer | ")[1]
    assert ("torch.cuda-oom", "error") in _findings(log)


def test_a_recovery_line_before_the_failure_does_not_recover_it() -> None:
    assert ("torch.cuda-oom", "error") in _findings(RECOVER + STEP + OOM)


def test_every_engine_has_a_recovered_failure_rule() -> None:
    """The engines whose recoveries are logged each have a warning rule for them."""
    warned = {r.rule.engine for r in default_pack().rules if r.rule.severity == "warning"}
    assert {"vllm", "sglang", "tgi", "ggml", "xla", "lightning", "generic"} <= warned


# torch 2.14.1 torch/_inductor/select_algorithm.py: one kernel choice's RuntimeError (here a CUDA
# out of memory) during max-autotune is logged with log.error, then the choice is dropped and
# compilation goes on ("Runtime error during autotuning: \n%s. \nIgnoring this choice.")
AUTOTUNE_PREFIX = "E1205 10:00:00.123000 1234 site-packages/torch/_inductor/select_algorithm.py:5331] [0/0] "
AUTOTUNE_OOM = (
    "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.02 GiB "
    "is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use. Of the allocated memory "
    "20.10 GiB is allocated by PyTorch, and 1.90 GiB is reserved by PyTorch but unallocated.. \n"
)
TRAIN_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "23.64 GiB of which 2.02 GiB is free.\n"
)


def _autotune(prefix: str = AUTOTUNE_PREFIX) -> str:
    return (
        f"{prefix}Runtime error during autotuning: \n{prefix}{AUTOTUNE_OOM}{prefix}Ignoring this choice.\n"
        "  triton_mm_1 0.5120 ms 100.0%\n"
    )


def test_an_oom_of_one_autotuning_choice_that_inductor_ignored_is_a_warning() -> None:
    for prefix in (AUTOTUNE_PREFIX, ""):
        report = oomdoctor.diagnose((_autotune(prefix) + STEP).encode())
        assert [(f.kind, f.severity, f.figures["requested_bytes"]) for f in report.findings] == [
            ("torch.cuda-oom", "warning", 1610612736)
        ]
        assert report.summary.errors == 0


def test_the_autotuning_oom_without_ignoring_the_choice_is_an_error() -> None:
    assert _findings(f"{AUTOTUNE_PREFIX}Runtime error during autotuning: \n{AUTOTUNE_PREFIX}{AUTOTUNE_OOM}") == [
        ("torch.cuda-oom", "error")
    ]


def test_a_failure_after_a_survived_one_is_the_runs_error() -> None:
    report = oomdoctor.diagnose((_autotune() + STEP * 40 + TRAIN_OOM).encode())
    assert [(f.severity, f.figures["requested_bytes"]) for f in report.findings] == [
        ("warning", 1610612736),
        ("error", 4294967296),
    ]
    assert report.summary.errors == 1
