"""TGI remedies: values below the failing N, the input-limit constraint, runtime fractions."""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, only_error, remedy


def test_prefill_tokens_halved_below_n() -> None:
    """other-017: 1024 prefill tokens failed at warm-up, and the log shows no input limit: 512 is below
    TGI 1.x's default --max-input-length (1024), which the launcher would refuse, so the input limit
    comes down too, in the spelling every release takes alone (the version is not in the log). 1024 is
    below the launcher's default prefill budget (4096), so quantizing leads and this is the stopgap."""
    f = only_error(diagnose("tgi/other-017.log"))
    assert remedy(f, "tgi.max-batch-prefill-tokens").flags == {"--max-batch-prefill-tokens": "512",
                                                               "--max-input-length": "512"}
    assert f.remedies[0].flags == {"--quantize": "eetq"}


def test_prefill_value_also_lowers_the_input_limit_it_must_cover() -> None:
    f = only_error(diagnose("tgi/synthetic-warmup-prefill-oom.log"))
    # 8192 / 2 = 4096 < max_input_tokens 8000: TGI requires prefill >= input, so both drop
    assert remedy(f, "tgi.max-batch-prefill-tokens").flags == {
        "--max-batch-prefill-tokens": "4096",
        "--max-input-tokens": "4096",
    }


def test_tgi_1x_is_told_the_input_flag_it_has() -> None:
    """TGI 1.x's Args dump has max_input_length (no --max-input-tokens before 2.0)."""
    import oomdoctor

    log = (
        '2024-01-10T10:00:00.000000Z  INFO text_generation_launcher: Args { model_id: "bigscience/bloom-560m", '
        "num_shard: None, quantize: None, max_input_length: 8000, max_total_tokens: 8192, "
        "max_batch_prefill_tokens: 8192, max_batch_total_tokens: None, cuda_memory_fraction: 1.0 }\n"
        "2024-01-10T10:01:30.000000Z ERROR warmup{max_input_length=8000 max_prefill_tokens=8192 max_total_tokens=8192}"
        ":warmup: text_generation_client: router/client/src/lib.rs:33: Server error: Not enough memory to handle 8192 "
        "prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n"
    )
    f = oomdoctor.diagnose(log).findings[0]
    # 8192 / 2 = 4096 < max_input_length 8000: both drop, under 1.x's spelling
    assert remedy(f, "tgi.max-batch-prefill-tokens").flags == {
        "--max-batch-prefill-tokens": "4096",
        "--max-input-length": "4096",
    }


def test_serving_oom_lowers_cuda_memory_fraction() -> None:
    f = only_error(diagnose("tgi/other-020.log"))
    # 1.0 - 222 MiB / 39.39 GiB - 0.01 = 0.9845 -> 0.98
    r = remedy(f, "tgi.cuda-memory-fraction")
    assert r.flags == {"--cuda-memory-fraction": "0.98"}
    assert r.fits is True


def test_max_total_tokens_from_the_inferred_capacity() -> None:
    f = only_error(diagnose("tgi/synthetic-max-total-tokens.log"))
    assert f.remedies[0].flags == {"--max-total-tokens": "21504", "--max-input-tokens": "21503"}


def test_tgi_remedies_silent_outside_tgi() -> None:
    f = Finding(
        rule="torch.cuda-oom", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t", message="m",
        location=Location(line=1, end_line=1), figures={"requested_bytes": 2**28, "total_bytes": 2**34},
    )
    assert calculator("tgi.cuda-memory-fraction")(AdviceInput(f, Context(engine="vllm"))) is None
    got = calculator("tgi.cuda-memory-fraction")(AdviceInput(f, Context(engine="tgi")))
    assert got is not None and got.flags == {"--cuda-memory-fraction": "0.97"}
