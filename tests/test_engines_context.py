"""Context-rule examples of the engine rule files: each line yields exactly the values it states."""

from __future__ import annotations

from typing import Any

import pytest

import oomdoctor
from oomdoctor.rulepack import default_pack

FILES = ("sglang.toml", "tgi.toml", "llamacpp.toml", "trtllm.toml", "xla.toml", "host.toml", "training.toml")
CONTEXTS = [c for c in default_pack().contexts if c.source.endswith(FILES)]


def _value(ctx: Any, name: str) -> Any:
    return getattr(ctx, name) if name in type(ctx).model_fields else ctx.extra.get(name)


@pytest.mark.parametrize(
    ("rule_id", "example"),
    [(c.rule.id, ex) for c in CONTEXTS for ex in c.rule.match],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_engine_context_examples(rule_id: str, example: dict[str, Any]) -> None:
    report = oomdoctor.diagnose(str(example["log"]).encode() + b"\n")
    want = example["values"]
    assert {k: _value(report.context, k) for k in want} == want, rule_id
    assert not [f for f in report.findings if f.severity == "error"]


def test_every_engine_file_has_context_examples() -> None:
    with_examples = {c.source.rsplit("/", 1)[-1] for c in CONTEXTS if c.rule.match}
    assert with_examples >= {"sglang.toml", "tgi.toml", "llamacpp.toml", "trtllm.toml", "training.toml"}
