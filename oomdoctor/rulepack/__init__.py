"""The rule pack: TOML data validated by JSON Schema, compiled once."""

from oomdoctor.rulepack.loader import CompiledRule, RulePack, RulePackError, default_pack, load_pack

__all__ = ["CompiledRule", "RulePack", "RulePackError", "default_pack", "load_pack"]
