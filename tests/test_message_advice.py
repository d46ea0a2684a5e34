"""The message's own advice is always among the remedies (issue 13).

Every example of every rule is read for advice sentences ("Try increasing `gpu_memory_utilization`",
"Please try to increase --mem-fraction-static", "Try to lower your batch size", ...). Each advice
sentence is either a knob (ADVICE: the remedies that follow it, any one of which satisfies it) or
not one (NOT_A_KNOB: a debugging hint, or a hint that holds only under a condition the advisor
checks itself). A finding whose example carries a knob must offer one of its remedies, or be listed
in GAPS with the reason it cannot. A new rule whose example carries an advice sentence that is in
neither table fails until it is classified.
"""

from __future__ import annotations

import pytest
import regex

import oomdoctor
from oomdoctor.rulepack import default_pack

PACK = default_pack()

#: an advice sentence: the imperative a message gives its reader
SENTENCE = regex.compile(r"(?i)\b(?:try|please|consider|you (?:can|may|should))\b[^.]*")

#: advice sentence (pattern) -> the remedies that carry it out (any one suffices)
ADVICE: list[tuple[str, frozenset[str]]] = [
    # torch 2.14.1's cuDNN message: "Consider calling torch.cuda.memory.set_per_process_memory_fraction(...)"
    # (a sentence here ends at the first ".")
    (r"(?i)consider calling torch$", frozenset({"torch.memory-fraction"})),
    (r"(?i)try increasing `?gpu_memory_utilization`?[^.]*or decreasing `?max_model_len`?",
     frozenset({"vllm.gpu-memory-utilization.raise", "vllm.gpu-memory-utilization.raise-for-kv", "vllm.max-model-len"})),
    (r"(?i)try increasing `?VLLM_CPU_KVCACHE_SPACE`? or decreasing `?max_model_len`?", frozenset({"vllm.max-model-len"})),
    (r"(?i)try increasing `?gpu_memory_utilization`?(?![^.]*decreasing)",
     frozenset({"vllm.gpu-memory-utilization.raise", "vllm.gpu-memory-utilization.raise-for-kv"})),
    (r"(?i)try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using --quantization",
     frozenset({"vllm.tensor-parallel-size", "vllm.quantization", "vllm.quantization-4bit"})),
    (r"(?i)please try lowering `?max_num_seqs`? or `?gpu_memory_utilization`?",
     frozenset({"vllm.max-num-seqs", "vllm.gpu-memory-utilization.lower"})),
    (r"(?i)please lower max_num_seqs to at most \d+", frozenset({"vllm.max-num-seqs"})),
    (r"(?i)consider reducing max_num_seqs", frozenset({"vllm.max-num-seqs"})),
    (r"(?i)please increase max_num_batched_tokens", frozenset({"vllm.max-num-batched-tokens.raise"})),
    (r"(?i)please increase the swap space", frozenset({"vllm.swap-space.raise"})),
    (r"(?i)please reduce the input size or increase the encoder cache size", frozenset({"vllm.limit-mm-per-prompt"})),
    (r"(?i)you should increase `max_model_len`, reduce `max_num_seqs`", frozenset({"vllm.max-model-len", "vllm.max-num-seqs"})),
    (r"(?i)please try to increase --mem-fraction-static", frozenset({"sglang.mem-fraction-static.raise"})),
    # vllm.rs 1b00e27 kvcache_allocator.rs
    (r"(?i)try reducing --max-model-len or --max-num-seqs", frozenset({"vllm-rs.max-model-len", "vllm-rs.max-num-seqs"})),
    (r"(?i)try to lower your batch size", frozenset({"sglang.max-running-requests", "sglang.chunked-prefill-size"})),
    (r"(?i)please set a smaller number for `?--max-running-requests`?", frozenset({"sglang.max-running-requests"})),
    (r"(?i)please try to raise your shared memory limit", frozenset({"host.shm-size"})),
    (r"(?i)try increasing it via the context size", frozenset({"ggml.ctx-size.raise"})),
    (r"(?i)give more memory to CUDA driver by reducing XLA_PYTHON_CLIENT_MEM_FRACTION", frozenset({"xla.mem-fraction.lower"})),
    # OpenVINO 2024.4.0's GPU plugin: a smaller batch, fewer streams (NUM_STREAMS), lower precision
    # (INFERENCE_PRECISION_HINT): no OpenVINO calculator exists yet
    (r"(?i)reduce memory consumption\s*\(use smaller batch size, less streams, lower precision",
     frozenset({"openvino.num-streams"})),
]

#: advice sentences that name no knob to turn for this failure
NOT_A_KNOB = [
    # PyTorch's allocator hints hold only "if reserved but unallocated memory is large": the
    # fragmentation cause decides from the account (issue 13, pattern 1)
    r"(?i)try setting (?:PYTORCH_(?:CUDA_|HIP_)?ALLOC_CONF=expandable_segments:True|max_split_size_mb) to avoid fragmentation",
    r"(?i)try setting PYTORCH_CUDA_ALLOC_C\s*ONF=expandable_segments:True",  # a line wrapped by the paste
    r"(?i)please use `empty_cache`",  # frees this process's cache: no remedy for a peak
    r"(?i)consider passing (?:CUDA_LAUNCH_BLOCKING=1|AMD_SERIALIZE_KERNEL=3)",  # debugging, not memory
    r"(?i)please check the stack trace",
    r"(?i)try(?:ing)? to allocate",  # a figure ("Try to allocate 8192 tokens"), not advice
    r"(?i)trying with smaller n_batch",  # llama.cpp's own retry, a warning
    r"(?i)trying to instantiate CUDA graph",  # the figure of XLA's message
]

#: (rule id, example index) -> why its advice cannot be among the remedies
GAPS: dict[tuple[str, int], str] = {
    ("torch.cudnn-oom-outside-allocator", 0): "the message states no figure (capacity, this process's memory, free) "
                                              "to size the fraction from",
    ("vllm.v0.swap.exhausted", 0): "the swap space in use is not in the message, so no larger --swap-space can be computed",
    ("vllm.v1.encoder-cache.item-too-large", 0): "--limit-mm-per-prompt bounds items per prompt, not the cache size; the message's fix "
                                                 "depends on the vLLM version's encoder-cache sizing, which the message does not show",
    ("vllm.v1.encoder-cache.item-too-large", 1): "as example 0: the encoder cache size is not a flag of its own in the versions that print it",
    ("vllm.mm.profiling-seq-too-short", 0): "a start-up warning; the lengths it names are figures, the remedy for the failure it "
                                            "predicts belongs to that failure",
    ("llama.server-kv-cache-retry", 1): "a retry warning; as llama.server-kv-cache-full, the server's -c and -np are not in it",
    ("openvino.gpu-cl-out-of-resources", 1): "OpenVINO 2024.4's generic advice (a driver update; a smaller batch, fewer streams, "
                                              "lower precision): the batch is the application's own and the log names no "
                                              "application, stream count or precision to size a change from",
}


def _cases() -> list[tuple[str, int, str]]:
    return [(r.id, i, m.log) for r in PACK.rules for i, m in enumerate(r.rule.match) if SENTENCE.search(m.log)]


CASES = _cases()


def _knobs(log: str) -> tuple[list[frozenset[str]], list[str]]:
    """(the remedy sets of the knobs the log advises, advice sentences in neither table)."""
    knobs, unknown = [], []
    for m in SENTENCE.finditer(log):
        text = log[max(0, m.start() - 40) : m.end()]
        hit = [ids for pat, ids in ADVICE if regex.search(pat, text)]
        if hit:
            knobs.append(hit[0])
        elif not any(regex.search(p, text) for p in NOT_A_KNOB):
            unknown.append(m.group(0))
    return knobs, unknown


#: knobs no calculator exists for yet: their examples are in GAPS
UNWRITTEN = frozenset({"vllm.swap-space.raise", "vllm.limit-mm-per-prompt", "openvino.num-streams"})


def test_the_scan_sees_advice() -> None:
    from oomdoctor.advisor.registry import remedy_ids

    assert len(CASES) > 40
    assert all((rid, i) in {(c[0], c[1]) for c in CASES} for rid, i in GAPS)
    named = frozenset().union(*(ids for _, ids in ADVICE))
    assert named - UNWRITTEN <= set(remedy_ids()), sorted(named - UNWRITTEN - set(remedy_ids()))
    assert not UNWRITTEN & set(remedy_ids()), "a calculator now exists: drop it from UNWRITTEN and its examples from GAPS"


@pytest.mark.parametrize(("rule_id", "i", "log"), CASES, ids=[f"{c[0]}[{c[1]}]" for c in CASES])
def test_the_messages_own_advice_is_among_the_remedies(rule_id: str, i: int, log: str) -> None:
    knobs, unknown = _knobs(log)
    assert not unknown, f"classify this advice in ADVICE or NOT_A_KNOB: {unknown}"
    if not knobs:
        return
    findings = oomdoctor.diagnose(log.encode(), source="<example>").findings
    # the example's own finding (another rule may name it: rule examples' ``named_by``)
    f = next((f for f in findings if f.rule == rule_id), findings[0])
    ids = {r.id for r in f.remedies}
    missing = [sorted(k) for k in knobs if not k & ids]
    if (rule_id, i) in GAPS:
        assert missing, f"now given: drop {(rule_id, i)} from GAPS"
        return
    assert not missing, f"{rule_id}[{i}]: the message's advice {missing} is not among {sorted(ids)}"


def test_the_advice_carries_the_messages_own_numbers() -> None:
    mamba = (
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (612). Each decode sequence requires one "
        "Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 612 or increase "
        "gpu_memory_utilization."
    )
    f = oomdoctor.diagnose(mamba.encode(), source="<mamba>").findings[0]
    r = next(r for r in f.remedies if r.id == "vllm.max-num-seqs")
    assert r.flags == {"--max-num-seqs": "612"} and r.confidence == "high"
    mm = (
        "ValueError: Chunked MM input disabled but max_tokens_per_mm_item (16384) is larger than max_num_batched_tokens "
        "(8192). Please increase max_num_batched_tokens."
    )
    f = oomdoctor.diagnose(mm.encode(), source="<mm>").findings[0]
    assert [(r.id, r.flags) for r in f.remedies] == [("vllm.max-num-batched-tokens.raise", {"--max-num-batched-tokens": "16384"})]
