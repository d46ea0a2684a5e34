"""The core imports no typer, rich or web framework (DESIGN §1)."""

from __future__ import annotations

import subprocess
import sys

CORE = ["oomdoctor", "oomdoctor.scanner", "oomdoctor.advisor", "oomdoctor.api", "oomdoctor.render.json"]


def test_core_imports_no_cli_or_web_framework() -> None:
    code = (
        "import sys\n"
        f"for m in {CORE!r}: __import__(m)\n"
        "import oomdoctor\n"
        "oomdoctor.diagnose('CUDA out of memory. Tried to allocate 2.00 MiB')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('typer', 'rich', 'click', 'fastapi', 'starlette', 'uvicorn'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
