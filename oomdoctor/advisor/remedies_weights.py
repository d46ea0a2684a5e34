"""Weights that do not fit one GPU, in the knobs of the program that loads them.

A serving engine has its own levers (tensor parallelism, ``--quantization``: remedies_vllm,
remedies_sglang, remedies_tgi); a llama.cpp build offloads layers (remedies_ggml). Everything else
loads the model through PyTorch, and what the user can change is the program's own setting: these
calculators speak it for the product the log names (``finding.product``) and say nothing for a
program whose knob they do not know. Each knob cites where the program defines it.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import checkpoint_quantized, engine_of, one_request, product_of
from oomdoctor.advisor.account import process_held
from oomdoctor.advisor.cause import FULL_SHARE, engine_for
from oomdoctor.advisor.prescription import prescribed, remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.siblings import ranks_share_gpu
from oomdoctor.report import Remedy

#: engines with their own weight levers (see the module docstring)
_OWN_LEVERS = ("vllm", "sglang", "tgi", "tensorrt-llm", "llama.cpp", "ollama", "ggml", "jax", "xla", "tensorflow")

#: product -> (kind, knob, value): how the program moves weights off the GPU
#: - comfyui: comfy/cli_args.py `--lowvram` ("Split the unet in parts to use less vram")
#: - fooocus: ldm_patched/modules/args_parser.py `--always-low-vram`
#: - diffusers: DiffusionPipeline.enable_model_cpu_offload() (diffusers >= 0.17; needs accelerate)
#: - transformers: from_pretrained(device_map="auto") (Accelerate's big-model inference: layers that
#:   do not fit the GPUs go to the CPU)
#: - text-generation-webui: none listed; `--auto-devices` is gone from v4.7.3's modules/shared.py (the
#:   version rules/advice/knobs.toml reads), and a log rarely says which one runs
OFFLOAD: dict[str, tuple[str, str, str]] = {
    "comfyui": ("flag", "--lowvram", ""),
    "fooocus": ("flag", "--always-low-vram", ""),
    "diffusers": ("setting", "pipe.enable_model_cpu_offload()", "@instead_of_to"),
    "transformers": ("setting", "from_pretrained(device_map=...)", '"auto"'),
    "accelerate": ("setting", "from_pretrained(device_map=...)", '"auto"'),
}

#: product -> (kind, knob, value): how the program loads the weights quantized
#: - llama-factory: src/llamafactory/hparams/model_args.py `quantization_bit` (4 or 8: QLoRA)
#: - axolotl: config `load_in_4bit: true` with `adapter: qlora` (axolotl docs, config reference)
#: - text-generation-webui: modules/shared.py `--load-in-4bit` (bitsandbytes, transformers loader)
#: - transformers / hf-trainer / trl: from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True))
QUANTIZE: dict[str, tuple[str, str, str]] = {
    "llama-factory": ("setting", "quantization_bit", "4"),
    "axolotl": ("setting", "load_in_4bit", "true (with adapter: qlora)"),
    "text-generation-webui": ("flag", "--load-in-4bit", ""),
    "transformers": ("setting", "from_pretrained(quantization_config=...)", "BitsAndBytesConfig(load_in_4bit=True)"),
    "hf-trainer": ("setting", "from_pretrained(quantization_config=...)", "BitsAndBytesConfig(load_in_4bit=True)"),
    "trl": ("setting", "from_pretrained(quantization_config=...)", "BitsAndBytesConfig(load_in_4bit=True)"),
}


def _own_levers(inp: AdviceInput) -> bool:
    """The program has levers of its own for its weights (an engine), or the weights are not what
    is misplaced: the job's ranks share one GPU (siblings.py)."""
    return engine_of(inp) in _OWN_LEVERS or ranks_share_gpu(inp.finding, inp.context)


def resident_fills_card(inp: AdviceInput) -> bool:
    """This process holds at least FULL_SHARE of the card: what stays resident (the weights and, when
    training, gradients and optimizer states) is most of the memory, not the failing request."""
    total, held = inp.fig("total_bytes"), process_held(inp.figures)
    return bool(total and held and held >= FULL_SHARE * total)


def _activations_only(inp: AdviceInput) -> bool:
    """An activation peak with room held elsewhere than by this process's resident state: the weights'
    remedies are for a card the process itself fills."""
    cause = inp.finding.cause
    return cause is not None and cause.id == "activation-peak" and not resident_fills_card(inp)


def _knob(kind: str, knob: str, value: str) -> dict[str, dict[str, str]]:
    return {"flags" if kind == "flag" else "settings": {knob: value}}


def _product_knob(rid: str, table: dict[str, tuple[str, str, str]], inp: AdviceInput) -> Remedy | None:
    """``rid`` in the knob ``table`` gives the product the log names; None for a program with its own
    levers or whose knob the table does not know."""
    if _own_levers(inp) or _activations_only(inp):
        return None
    cause = inp.finding.cause
    full = cause is not None and cause.id == "activation-peak"  # the weights fit, and leave no room
    return knob_remedy(rid, table, inp, "why_full" if full else "why")


def knob_remedy(
    rid: str, table: dict[str, tuple[str, str, str]], inp: AdviceInput, why: str = "why"
) -> Remedy | None:
    """``rid`` spoken in the knob ``table``'s entry for the product the log names (medium
    confidence, fit unknown; ``why`` the text's variant); None when the table does not know the product."""
    product = product_of(inp)
    if product not in table:
        return None
    kind, knob, value = table[product]
    if value.startswith("@"):  # a value in words: the remedy's text of that name, in the language in force
        value = remedy_text(rid, value[1:])
    return Remedy(
        id=rid,
        title=remedy_text(rid, "title", knob=knob),
        fits=None,
        confidence="medium",
        why=remedy_text(rid, why),
        **_knob(kind, knob, value),  # type: ignore[arg-type]
    )


@remedy("weights.offload")
def offload(inp: AdviceInput) -> Remedy | None:
    """Keep part of the weights in host memory, with the program's own switch for it."""
    return _product_knob("weights.offload", OFFLOAD, inp)


@remedy("weights.quantize-on-load")
def quantize_on_load(inp: AdviceInput) -> Remedy | None:
    """Load the weights in 4 bits (about a quarter of bf16's 2 bytes per parameter)."""
    if checkpoint_quantized(inp.context):
        return None
    return _product_knob("weights.quantize-on-load", QUANTIZE, inp)


@remedy("weights.smaller-model")
def smaller_model(inp: AdviceInput) -> Remedy | None:
    """A smaller or quantized variant of the model, for a program whose knobs are not known."""
    if _own_levers(inp):
        return None
    cause = inp.finding.cause
    if inp.finding.rule == "torch.cuda-runtime-oom" and not one_request(inp) and (
        cause is None or "weights.smaller-model" not in prescribed(cause.id, engine_for(inp.finding, inp.context), inp.finding.phase)
    ):
        # the runtime-OOM rule lists it for one item per request, where the model is all there is to
        # shrink; elsewhere only a cause that calls for it (the weights do not fit) gives it
        return None
    return Remedy(
        id="weights.smaller-model",
        title=remedy_text("weights.smaller-model", "title"),
        settings={"model": remedy_text("weights.smaller-model", "setting")},
        fits=None,
        confidence="low",
        why=remedy_text(
            "weights.smaller-model",
            "why_one_request" if one_request(inp) else "why_unshown" if _holder_unshown(inp) else "why",
        ),
    )


def _holder_unshown(inp: AdviceInput) -> bool:
    """An Apple MPS failure whose log does not show the weights loading: MPS's message sizes the memory
    but names no holder, so the smaller model is offered on the reading that the weights are the bulk."""
    return inp.finding.kind == "torch.mps-oom" and inp.finding.phase != "weights-load"
