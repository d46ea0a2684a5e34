"""A PyTorch OOM inside an engine (vLLM) or plain PyTorch: memory outside PyTorch's allocator is named,
expandable segments are offered where the figures show fragmentation, and a remedy whose saving is
below the shortfall is not ranked as a fix. Synthetic logs in PyTorch 2.x's and vLLM's own wording,
with the figures of tune cases (fresh-056, fresh-061, new-002)."""

from __future__ import annotations

import oomdoctor
from oomdoctor.advisor.account import UNACCOUNTED_BYTES, unaccounted
from oomdoctor.advisor.ranking import NEGLIGIBLE_SAVING, _rank_key, _saves_too_little
from oomdoctor.advisor.registry import AdviceInput
from oomdoctor.advisor.run_steps import NVIDIA_SMI_COMPUTE_APPS
from oomdoctor.report import Account, AccountEntry, Context, Finding, Location, Remedy

MiB, GiB = 2**20, 2**30
VLLM = "INFO 01-10 10:00:00 [api_server.py:1000] vLLM API server version 0.8.5\n"
TAIL = ("If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def oom(req: str, total: str, free: str, in_use: str, allocated: str, pools: str, spare: str) -> str:
    return (f"ERROR 01-10 10:05:00 [core.py:400] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. "
            f"GPU 0 has a total capacity of {total} of which {free} is free. Including non-PyTorch memory, this "
            f"process has {in_use} memory in use. Of the allocated memory {allocated} is allocated by PyTorch, with "
            f"{pools} allocated in private pools (e.g., CUDA Graphs), and {spare} is reserved by PyTorch but "
            f"unallocated. {TAIL}\n")


def only_error(log: str) -> Finding:
    errors = [f for f in oomdoctor.diagnose(log).findings if f.severity == "error"]
    assert len(errors) == 1
    return errors[0]


def ids(f: Finding) -> list[str]:
    return [r.id for r in f.remedies]


# -- 1. memory outside PyTorch's allocator ---------------------------------------------------------


def test_this_process_outside_its_allocator_is_named_and_looked_at_first() -> None:
    # fresh-056: 79.15 GiB − 2.19 MiB free − (71.57 GiB + 611.60 MiB) = 6.98 GiB outside PyTorch's
    # allocator, 79.12 − 72.17 = 6.95 GiB of it in this process: over 2 GiB and 5 % of the card (3.96 GiB)
    f = only_error(VLLM + oom("138.00 MiB", "79.15 GiB", "2.19 MiB", "79.12 GiB", "71.57 GiB", "39.77 MiB", "611.60 MiB"))
    assert f.cause is not None and f.cause.id == "engine-headroom"
    assert ("6.98 GiB of the GPU is held outside PyTorch's allocator (79.15 GiB − 2.19 MiB free − 72.17 GiB "
            "reserved by PyTorch): 6.95 GiB by this process itself") in f.cause.summary
    assert f.cause.summary.endswith("Look at it with nvidia-smi before cutting a budget or a batch.")
    first = f.remedies[0]
    assert first.id == "vllm.gpu-memory-utilization.lower" and first.flags == {"--gpu-memory-utilization": "0.89"}
    assert [s.command for s in first.run] == [NVIDIA_SMI_COMPUTE_APPS]


def test_hidden_process_figure_is_not_stated_as_a_fact() -> None:
    # a container: "this process has 0 bytes"; 79.10 GiB − 19.88 MiB − (72.32 GiB + 350.95 MiB) = 6.42 GiB
    f = only_error(VLLM + oom("20.00 MiB", "79.10 GiB", "19.88 MiB", "0 bytes", "72.32 GiB", "108.00 MiB", "350.95 MiB"))
    assert f.cause is not None and f.account is not None
    assert "6.42 GiB of the GPU is held outside PyTorch's allocator" in f.cause.summary
    assert "or by another process: the message does not say which" in f.cause.summary
    assert "(0 B in use) is not a fact: inside a container NVML cannot see the process" in f.cause.summary
    # the account does not place it in other processes either
    assert f.account.get("other-processes") is None
    fig = f.figures
    assert f.account.get("outside-pytorch") == (fig["total_bytes"] - fig["free_bytes"] - fig["allocated_bytes"]
                                                - fig["reserved_unallocated_bytes"])


def test_small_gap_says_nothing_more() -> None:
    # fresh-061: 79.10 GiB − 19.88 MiB − (77.32 GiB + 350.95 MiB) = 1.42 GiB, under 2 GiB: a CUDA context and workspaces
    f = only_error(VLLM + oom("20.00 MiB", "79.10 GiB", "19.88 MiB", "0 bytes", "77.32 GiB", "108.00 MiB", "350.95 MiB"))
    assert f.cause is not None and "outside PyTorch's allocator" not in f.cause.summary
    assert not f.remedies[0].run
    assert unaccounted({"total_bytes": 80 * GiB, "free_bytes": 0, "allocated_bytes": 76 * GiB,
                        "reserved_unallocated_bytes": 0}) is None  # 4 GiB: not above 5 % of 80 GiB
    gap = unaccounted({"total_bytes": 24 * GiB, "free_bytes": 0, "allocated_bytes": 21 * GiB,
                       "reserved_unallocated_bytes": 0, "in_use_bytes": 22 * GiB})
    assert gap is not None and (gap.gap, gap.own, gap.others, gap.hidden) == (3 * GiB, GiB, None, False)
    assert 2 * GiB == UNACCOUNTED_BYTES


# -- 2. expandable segments where the figures show fragmentation -----------------------------------


def test_engine_fragmentation_offers_expandable_segments_with_the_sleep_mode_caveat() -> None:
    # new-002: 960.26 MiB reserved but unallocated (4.0 % of 23.56 GiB) against an 80 MiB request
    f = only_error(VLLM + oom("80.00 MiB", "23.56 GiB", "33.94 MiB", "23.44 GiB", "22.01 GiB", "17.88 MiB", "960.26 MiB"))
    assert f.cause is not None and f.cause.id == "engine-headroom"
    assert ids(f)[:2] == ["vllm.gpu-memory-utilization.lower", "torch.expandable-segments"]
    seg = f.remedies[1]
    assert seg.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert (seg.fits, seg.confidence, seg.saves_bytes) == (True, "high", round(960.26 * MiB))
    assert "sleep mode" in seg.tradeoff


def test_engine_slack_with_free_memory_covering_the_request() -> None:
    # 600 MiB stranded (2.5 % of 23.56 GiB) + 600 MiB free >= 1 GiB requested: the pieces are there
    f = only_error(VLLM + oom("1.00 GiB", "23.56 GiB", "600.00 MiB", "22.90 GiB", "21.80 GiB", "17.88 MiB", "600.00 MiB"))
    seg = next(r for r in f.remedies if r.id == "torch.expandable-segments")
    assert (seg.fits, seg.confidence, seg.saves_bytes) == (True, "medium", 600 * MiB)


def test_ordinary_slack_is_not_fragmentation() -> None:
    # fresh-061: 350.95 MiB reserved but unallocated is 0.4 % of 79.10 GiB (labelled harmful there)
    f = only_error(VLLM + oom("20.00 MiB", "79.10 GiB", "19.88 MiB", "0 bytes", "77.32 GiB", "108.00 MiB", "350.95 MiB"))
    assert "torch.expandable-segments" not in ids(f)


def test_rocm_message_keeps_its_own_variable() -> None:
    log = (VLLM + "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 80.00 MiB. GPU 0 has a total capacity "
           "of 23.98 GiB of which 33.94 MiB is free. Of the allocated memory 22.01 GiB is allocated by PyTorch, and "
           "960.26 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n")
    f = only_error(log)
    seg = next(r for r in f.remedies if r.id == "torch.expandable-segments")
    assert seg.env == {"PYTORCH_HIP_ALLOC_CONF": "expandable_segments:True"}


# -- 3. a saving below the shortfall -----------------------------------------------------------------


def test_eager_saving_below_the_shortfall_is_not_enough_alone() -> None:
    # fresh-056: CUDA graphs hold 39.77 MiB (private pools); 138.00 MiB − 2.19 MiB = 135.81 MiB is missing
    f = only_error(VLLM + oom("138.00 MiB", "79.15 GiB", "2.19 MiB", "79.12 GiB", "71.57 GiB", "39.77 MiB", "611.60 MiB"))
    eager = next(r for r in f.remedies if r.id == "vllm.enforce-eager")
    assert (eager.fits, eager.saves_bytes) == (False, round(39.77 * MiB))
    assert eager.why.endswith("It saves 39.77 MiB, less than the 135.81 MiB missing: not enough alone.")
    assert all(r.fits is not False for r in f.remedies[: f.remedies.index(eager)])


def test_eager_saving_below_a_tenth_of_the_shortfall_is_dropped() -> None:
    # 10.00 MiB of graphs against 136.00 MiB − 2.19 MiB = 133.81 MiB missing: under 10 %
    f = only_error(VLLM + oom("136.00 MiB", "79.15 GiB", "2.19 MiB", "79.12 GiB", "71.57 GiB", "10.00 MiB", "611.60 MiB"))
    assert "vllm.enforce-eager" not in ids(f)


def test_eager_covering_the_shortfall_fits() -> None:
    # new-001: 21.71 MiB of graphs against 136.00 MiB − 117.38 MiB = 18.62 MiB missing
    f = only_error(VLLM + oom("136.00 MiB", "23.56 GiB", "117.38 MiB", "22.82 GiB", "21.98 GiB", "21.71 MiB", "391.42 MiB"))
    eager = next(r for r in f.remedies if r.id == "vllm.enforce-eager")
    assert (eager.fits, eager.saves_bytes) == (True, round(21.71 * MiB))


def _input(shortfall: int, phase: str = "inference") -> AdviceInput:
    f = Finding(rule="t", kind="torch.cuda-oom", engine="pytorch", severity="error", phase=phase, title="t",
                message="m", location=Location(line=1, end_line=1),
                account=Account(entries=[AccountEntry(name="shortfall", bytes=shortfall, source="derived")]))
    return AdviceInput(f, Context(), {})


def test_saving_rule_is_any_engines() -> None:
    inp = _input(1 * GiB)
    short = Remedy(id="torch.reduce-batch", title="t", saves_bytes=512 * MiB)
    assert _saves_too_little(short, short.id, inp)
    assert not _saves_too_little(Remedy(id="x", title="t", saves_bytes=GiB), "x", inp)
    # a calculator that judged the fit itself keeps its verdict
    assert not _saves_too_little(Remedy(id="x", title="t", saves_bytes=MiB, fits=True), "x", inp)
    # skipping capture removes the failing allocation while capturing, whatever the graphs hold so far
    capture = _input(1 * GiB, phase="cudagraph-capture")
    assert not _saves_too_little(Remedy(id="vllm.enforce-eager", title="t", saves_bytes=MiB), "vllm.enforce-eager", capture)
    assert NEGLIGIBLE_SAVING == 0.10
    # not enough alone comes after every remedy when one fits, whatever its tier
    alone = Remedy(id="vllm.gpu-memory-utilization.lower", title="t", fits=False, confidence="high")
    fits = Remedy(id="vllm.quantization", title="t", fits=True, confidence="low")
    own = {"vllm.gpu-memory-utilization.lower"}
    assert _rank_key(fits, own, "engine-headroom", True) < _rank_key(alone, own, "engine-headroom", True)
    assert _rank_key(alone, own, "engine-headroom", False) < _rank_key(fits, own, "engine-headroom", False)


def test_plain_pytorch_gap_split_between_this_process_and_the_listed_ones() -> None:
    # 24.00 GiB − 100 MiB free − (18.00 GiB + 409.60 MiB) = 5.50 GiB outside the allocator: this process's
    # 20.50 GiB − 18.40 GiB = 2.10 GiB and process 4242's 3.00 GiB (12.5 % of the card: not the cause)
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "24.00 GiB of which 100.00 MiB is free. Process 4242 has 3.00 GiB memory in use. Including non-PyTorch "
           "memory, this process has 20.50 GiB memory in use. Of the allocated memory 18.00 GiB is allocated by "
           f"PyTorch, and 409.60 MiB is reserved by PyTorch but unallocated. {TAIL}\n")
    f = only_error(log)
    assert f.cause is not None and f.cause.id != "other-processes"
    assert ("5.50 GiB of the GPU is held outside PyTorch's allocator (24.00 GiB − 100.00 MiB free − 18.40 GiB "
            "reserved by PyTorch): 2.10 GiB by this process itself (NCCL, cuBLAS or CUDA-graph buffers, another "
            "library's pool, its CUDA context); 3.00 GiB by the other processes the message lists.") in f.cause.summary
    assert f.remedies[0].run[0].command == NVIDIA_SMI_COMPUTE_APPS


def test_old_message_reserved_in_total_leaves_the_holder_open() -> None:
    # PyTorch 1.x: 23.69 GiB − 100 MiB free − 18.50 GiB reserved in total = 5.09 GiB, no process figure
    log = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.69 GiB total capacity; "
           "18.00 GiB already allocated; 100.00 MiB free; 18.50 GiB reserved in total by PyTorch)\n")
    f = only_error(log)
    assert f.cause is not None
    assert ("5.09 GiB of the GPU is held outside PyTorch's allocator (23.69 GiB − 100.00 MiB free − 18.50 GiB "
            "reserved by PyTorch): by this process") in f.cause.summary
    assert "the message does not say which" in f.cause.summary and "not a fact" not in f.cause.summary
