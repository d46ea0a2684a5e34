"""Remedies that name their knob where the log gives no value for it (issue 32's ``fix`` figure), and
the families that got a remedy of their own: MONAI's sliding-window output buffer and TensorFlow's
variable initializers.

A knob whose value the log does not give is still the knob: the remedy carries its key with the
value in words (``num_ctx``: "half of the current value ..."), which the renderers show as prose and
never as a command (code_lines.is_words)."""

from __future__ import annotations

from pathlib import Path

import oomdoctor
from oomdoctor.advisor.code_lines import code_lines, is_words
from oomdoctor.render.common import setting_lines
from oomdoctor.report import Finding, Remedy

ROOT = Path(__file__).resolve().parent.parent


def _error(path: str) -> Finding:
    report = oomdoctor.diagnose((ROOT / "fixtures" / path).read_bytes(), source=path)
    errors = [f for f in report.findings if f.severity == "error"]
    assert len(errors) == 1
    return errors[0]


def test_a_value_in_words_is_prose_never_a_command() -> None:
    assert is_words("the index of an idle GPU (nvidia-smi shows it)")
    assert is_words("空いているGPUの番号")
    assert not is_words("8192") and not is_words("expandable_segments:True,max_split_size_mb:512")
    assert not is_words("") and not is_words("0,1") and not is_words("q8_0")
    r = Remedy(id="gpu.free-other-processes", title="t", env={"CUDA_VISIBLE_DEVICES": "an idle GPU's index"},
               flags={"--max-model-len": "22 % of the current value"})
    assert code_lines(r, "vllm-serve", "vllm") == []
    assert setting_lines(r) == ["CUDA_VISIBLE_DEVICES: an idle GPU's index", "--max-model-len: 22 % of the current value"]


def test_ollama_context_named_without_a_value() -> None:
    f = _error("ollama/fresh-104.log")
    assert f.product == "ollama"
    first = f.remedies[0]
    assert first.id == "ollama.num-ctx"
    assert first.settings == {"num_ctx": "half of the current value (the server log's n_ctx line shows it)"}
    assert first.code == [] and first.command is None
    # a knob in words sizes nothing: the launch facts are still asked for
    assert [r.id for r in f.remedies] == ["ollama.num-ctx", "ask.launch-facts"]


def test_ollama_layers_named_without_a_value() -> None:
    f = _error("ollama/other-006.log")
    rem = next(r for r in f.remedies if r.id == "ollama.num-gpu")
    assert rem.settings == {"num_gpu": "fewer than the layers offloaded now (ollama ps shows them)"}


def test_vllm_rs_share_names_no_value_in_its_flag() -> None:
    # the current --max-model-len is not in the log: the share is said in the title, and the flag
    # carries no words (a flag's value is a value or absent; words are for settings shown as prose)
    f = _error("vllm-rs/fresh-047.log")
    first = f.remedies[0]
    assert first.id == "vllm-rs.max-model-len"
    assert first.flags == {} and first.env == {}
    assert "22 %" in first.title
    assert [r.id for r in f.remedies][-1] == "ask.launch-facts"


def test_other_processes_put_no_placeholder_in_cuda_visible_devices() -> None:
    f = _error("other/other-065.log")
    assert f.cause is not None and f.cause.id == "other-processes"
    first = f.remedies[0]
    assert first.id == "gpu.free-other-processes"
    assert first.env == {}  # which GPU is idle is not in the log
    assert "CUDA_VISIBLE_DEVICES" in first.why
    assert [s.command for s in first.run] == ["nvidia-smi --query-compute-apps=pid,used_memory --format=csv"]


def test_tensorflow_variable_initializer_is_not_the_batch() -> None:
    f = _error("tensorflow/other-043.log")
    assert f.cause is not None and f.cause.id == "other-processes"
    assert "embeddings/Adam/Initializer/zeros (550.15 MiB)" in f.cause.summary
    ids = [r.id for r in f.remedies]
    assert ids == ["gpu.free-other-processes", "tf.memory-growth"]
    assert "xla.reduce-batch" not in ids  # no step ran yet: the batch is not what filled the GPU


def test_tensorflow_initializer_node_forms() -> None:
    from oomdoctor.advisor.cause import _tf_initializer

    assert _tf_initializer("[[Node: embeddings/Adam/Initializer/zeros = Const[dtype=DT_FLOAT]()]]") == (
        "embeddings/Adam/Initializer/zeros")
    assert _tf_initializer("[[{{node dense/kernel/Initializer/random_uniform}}]]") == (
        "dense/kernel/Initializer/random_uniform")
    assert _tf_initializer("[[Node: gradients/dense/MatMul_grad/MatMul_1 = MatMul[...]]]") is None


def test_monai_sliding_window_output_on_the_cpu() -> None:
    f = _error("pytorch/fresh-098.log")
    assert f.product == "monai"
    first = f.remedies[0]
    assert first.id == "monai.output-device"
    assert first.settings == {"sw_device": "cuda", "device": "cpu"}
    assert first.saves_bytes == f.figures["requested_bytes"] == 2899102925  # "2.70 GiB" as the parser rounds it
    assert first.fits is True
    assert [c.text for c in first.code] == ['sliding_window_inference(..., sw_device="cuda", device="cpu")']


def test_monai_remedy_needs_the_output_frame() -> None:
    log = (ROOT / "fixtures/pytorch/fresh-098.log").read_text().replace("output_image_list.append(", "out.append(")
    report = oomdoctor.diagnose(log.encode(), source="<test>")
    ids = [r.id for f in report.findings for r in f.remedies]
    assert "monai.output-device" not in ids
