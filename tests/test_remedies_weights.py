"""Weights that do not fit: the program's own offload and 4-bit switches, never a batch size."""

from __future__ import annotations

import pytest

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, only_error, remedy_ids


def _inp(product: str | None, engine: str = "pytorch", **ctx: object) -> AdviceInput:
    f = Finding(rule="torch.cuda-oom", kind="torch.cuda-oom", engine=engine, severity="error", title="t",
                message="m", location=Location(line=1, end_line=1), product=product, phase="weights-load")
    return AdviceInput(f, Context(product=product, **ctx))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "product,field,knob,value",
    [("comfyui", "flags", "--lowvram", ""),
     ("fooocus", "flags", "--always-low-vram", ""),
     ("diffusers", "settings", "pipe.enable_model_cpu_offload()", "instead of pipe.to('cuda')"),
     ("transformers", "settings", "from_pretrained(device_map=...)", '"auto"')],
)
def test_offload_speaks_the_products_own_switch(product: str, field: str, knob: str, value: str) -> None:
    r = calculator("weights.offload")(_inp(product))
    assert r is not None and getattr(r, field) == {knob: value}


def test_no_offload_switch_for_a_program_whose_knob_is_unknown() -> None:
    assert calculator("weights.offload")(_inp("pytorch")) is None
    assert calculator("weights.offload")(_inp(None)) is None
    # a serving engine has its own levers (tensor parallelism, --quantization)
    assert calculator("weights.offload")(_inp("comfyui", engine="vllm")) is None


@pytest.mark.parametrize(
    "product,field,knob,value",
    [("llama-factory", "settings", "quantization_bit", "4"),
     ("axolotl", "settings", "load_in_4bit", "true (with adapter: qlora)"),
     ("text-generation-webui", "flags", "--load-in-4bit", "")],
)
def test_quantize_on_load_in_the_products_setting(product: str, field: str, knob: str, value: str) -> None:
    r = calculator("weights.quantize-on-load")(_inp(product))
    assert r is not None and getattr(r, field) == {knob: value}


def test_no_second_quantization_of_a_quantized_checkpoint() -> None:
    assert calculator("weights.quantize-on-load")(_inp("llama-factory", quantization="gptq")) is None


def test_weights_that_do_not_fit_at_load_get_weight_remedies_not_a_batch() -> None:
    """other-068: LLaMA-Factory loading DeepSeek-R1 in bf16 on every rank (weights-load): its ZeRO-3
    config (each rank loads its shard), then quantization_bit; batch size and gradient checkpointing
    cannot change a load."""
    f = only_error(diagnose("transformers/other-068.log"))
    assert f.cause is not None and f.cause.id == "placement"
    ids = remedy_ids(f)
    assert ids[:2] == ["training.shard-state", "weights.quantize-on-load"]
    assert f.remedies[0].settings == {"deepspeed": "examples/deepspeed/ds_z3_config.json"}
    assert f.remedies[1].settings == {"quantization_bit": "4"}
    assert not {"torch.reduce-batch", "training.gradient-checkpointing", "host.low-cpu-mem-usage"} & set(ids)


def test_mps_limit_is_lifted_only_after_the_model_is_made_smaller() -> None:
    """PyTorch warns that lifting the MPS watermark can make the system unresponsive: the message's
    own advice stays among the remedies, after a smaller model."""
    f = only_error(diagnose("other/new-014.log"))
    ids = remedy_ids(f)
    assert ids.index("weights.smaller-model") < ids.index("torch.mps-high-watermark")
