"""A failed request exactly the size of one of the model's weight tensors: the weights were loading.

A serving engine (vLLM, SGLang, TGI) builds the model layer by layer on the GPU and fills each
parameter from the checkpoint before anything else runs: each allocation of that stage is one
weight tensor (vLLM's merged ``qkv_proj`` and ``gate_up_proj``, their unmerged pieces, ``o_proj``,
``down_proj``, the embedding and ``lm_head``), of ``out × in`` elements at the run's weight dtype,
column- and row-parallel layers divided by the tensor-parallel size (vLLM's
``ColumnParallelLinear``/``RowParallelLinear``; ``VocabParallelEmbedding`` splits the vocabulary).
Where the log shows no stage at all (phase unknown), a request equal to one of those sizes, to the
byte, names the stage: weights-load.

An activation can have the same size: ``tokens × out`` elements equals ``hidden × out`` when the
batch holds as many tokens as the model is wide (4096 tokens through Mistral-7B's merged
``gate_up_proj`` is 224 MiB, as its weight is). So the process must also hold less than the model's
weights (its share of them under tensor and pipeline parallelism; none is known when some are
offloaded to the CPU): the weights were not all on the GPU yet, so no batch had run. Without the held figure the
size alone names nothing. Only an unquantized checkpoint of a dense model whose ``config.json``
geometry the catalog has whole (hidden, intermediate and vocabulary sizes) is asked: a quantized or
MoE checkpoint's tensors have other shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomdoctor.advisor._engine_util import checkpoint_quantized
from oomdoctor.advisor.catalog import DTYPE_BYTES, ModelGeometry, find_model
from oomdoctor.report import Account, Context, Finding

#: engines that build the named model on each GPU of their tensor-parallel group before serving
LOADING_ENGINES = ("vllm", "sglang", "tgi")


@dataclass(frozen=True)
class WeightTensor:
    """One weight tensor of the model, as one GPU of the tensor-parallel group allocates it."""

    name: str
    #: its shape on that GPU (out × in), and the bytes of one element
    rows: int
    cols: int
    element_bytes: int

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * self.element_bytes

    def formula(self) -> str:
        return f"{self.rows} × {self.cols} × {self.element_bytes} B"


def weight_tensors(geo: ModelGeometry, element_bytes: int, tp: int = 1) -> list[WeightTensor]:
    """The weight tensors one GPU of ``tp`` allocates for a dense model of ``geo`` (none when the
    catalog lacks a size they need, or the split is not even)."""
    h, inter, vocab = geo.hidden_size, geo.intermediate_size, geo.vocab_size
    if not (h and inter and vocab) or geo.experts > 1 or geo.is_mla or tp < 1:
        return []
    q = geo.attention_heads * geo.head_dim
    kv = geo.kv_heads_per_rank(tp) * geo.head_dim  # (heads replicated where TP exceeds them)
    out: list[WeightTensor] = []

    def split(name: str, rows: int, cols: int, over_rows: bool = True) -> None:
        whole = rows if over_rows else cols
        if whole % tp:
            return
        if over_rows:
            out.append(WeightTensor(name, rows // tp, cols, element_bytes))
        else:
            out.append(WeightTensor(name, rows, cols // tp, element_bytes))

    split("q_proj", q, h)
    out.append(WeightTensor("k_proj/v_proj", kv, h, element_bytes))
    if q % tp == 0:
        out.append(WeightTensor("qkv_proj", q // tp + 2 * kv, h, element_bytes))
    split("o_proj", h, q, over_rows=False)
    split("gate_proj/up_proj", inter, h)
    split("gate_up_proj", 2 * inter, h)
    split("down_proj", h, inter, over_rows=False)
    split("embed_tokens/lm_head", vocab, h)
    return out


def loading_tensor(finding: Finding, context: Context, account: Account, engine: str | None) -> WeightTensor | None:
    """The weight tensor ``finding``'s request is, to the byte, while the process held less than the
    model's weights (module docstring); None when it is none, or the facts to tell are missing."""
    if engine not in LOADING_ENGINES or not finding.kind.startswith("torch.") or checkpoint_quantized(context):
        return None
    request, held = account.get("request"), account.get("allocated")
    if request is None or held is None:
        return None
    geo = find_model(context.model)
    if geo is None:
        return None
    element = DTYPE_BYTES.get(str(context.dtype or geo.dtype))
    if element is None or element != int(element):
        return None
    if context.launch_args.get("cpu_offload_gb") not in (None, "0", "0.0"):
        return None  # (part of the weights stays in host memory: the GPU's share is not known)
    tp = context.tensor_parallel_size or 1
    pp = context.pipeline_parallel_size or 1  # (each stage holds its share of the layers)
    total = geo.weight_bytes(element)
    if not total or held + request > -(-total // (tp * pp)):
        return None
    return next((t for t in weight_tensors(geo, int(element), tp) if t.bytes == request), None)
