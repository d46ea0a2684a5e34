"""Generate ``rules/schema.json`` from the rule models: ``python -m oomdoctor.rulepack.schema``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from oomdoctor.rulepack.model import RuleFile


def schema_text() -> str:
    schema = RuleFile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "oomdoctor rule file"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "rules" / "schema.json"
    target.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
