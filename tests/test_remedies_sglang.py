"""SGLang remedies: values computed from the log's figures, and silence outside SGLang logs."""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, only_error, remedy


def test_raise_fraction_from_a_too_low_value() -> None:
    r = remedy(only_error(diagnose("sglang/other-021.log")), "sglang.mem-fraction-static.raise")
    assert r.flags == {"--mem-fraction-static": "0.88"}


def test_raise_fraction_from_the_weights_share() -> None:
    # 1 - 17.54/78.68 = 0.7771 minimum, + 0.05 for the KV pool = 0.8271 -> 0.83
    f = only_error(diagnose("sglang/synthetic-not-enough-memory.log"))
    assert f.remedies[0].id == "sglang.mem-fraction-static.raise"
    assert f.remedies[0].flags == {"--mem-fraction-static": "0.83"}


def test_cuda_graph_failure_lowers_fraction_and_max_bs() -> None:
    f = only_error(diagnose("sglang/synthetic-cuda-graph-oom.log"))
    assert remedy(f, "sglang.mem-fraction-static.lower").flags == {"--mem-fraction-static": "0.85"}
    assert remedy(f, "sglang.cuda-graph-max-bs").flags == {"--cuda-graph-max-bs": "80"}
    assert remedy(f, "sglang.disable-cuda-graph").flags == {"--disable-cuda-graph": ""}


def test_prefill_chunk_fits_the_available_tokens() -> None:
    f = only_error(diagnose("sglang/synthetic-prefill-oom.log"))
    # min(8192 // 2, 3000) rounded down to 64 = 2944; 256 // 2 running requests
    assert remedy(f, "sglang.chunked-prefill-size").flags == {"--chunked-prefill-size": "2944"}
    assert remedy(f, "sglang.max-running-requests").flags == {"--max-running-requests": "128"}


def _torch_finding(engine_ctx: str | None) -> AdviceInput:
    f = Finding(
        rule="torch.cuda-oom", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t",
        message="m", location=Location(line=1, end_line=1), figures={"requested_bytes": 2**30},
    )
    return AdviceInput(f, Context(engine=engine_ctx, launch_args={"mem_fraction_static": "0.9"}))


def test_sglang_remedies_answer_only_for_sglang_logs() -> None:
    assert calculator("sglang.mem-fraction-static.lower")(_torch_finding("vllm")) is None
    got = calculator("sglang.mem-fraction-static.lower")(_torch_finding("sglang"))
    assert got is not None and got.flags == {"--mem-fraction-static": "0.85"}
