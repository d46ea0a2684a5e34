"""Generate ``oomdoctor/data/engine_args/llama.cpp.json``: llama.cpp's command-line flags per sampled release.

llama.cpp's flags (``llama-server``, ``llama-cli``, ...) are declared in ``common/arg.cpp`` as
``add_opt(common_arg({"-c", "--ctx-size"}, "N", "help", [](common_params & params, int value) {...})
.set_env("LLAMA_ARG_CTX_SIZE"))``. llama-cpp-python's sdist on PyPI vendors llama.cpp under
``vendor/llama.cpp``, so each sample is a llama-cpp-python release; the llama.cpp commit it vendors
is read from its CHANGELOG and recorded with it. A handler taking only ``params`` marks a switch;
one taking a value marks a flag that takes a value.

Usage (needs only pip and the network to PyPI)::

    python tools/gen_llamacpp_args.py 0.3.2 0.3.16 ... > oomdoctor/data/engine_args/llama.cpp.json

or ``--from DIR`` with already unpacked sdists ``DIR/<version>/llama_cpp_python-<version>/``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

_OPT = re.compile(r"add_opt\(common_arg\(\s*(?:\{[^}]*\}\s*,\s*)?\{([^}]*)\}", re.S)
_NAME = re.compile(r'"(-[^"]+)"')
_HANDLER = re.compile(r"\[\]\(common_params\s*&\s*params\s*(,[^)]*)?\)")
_ENV = re.compile(r'\.set_env\("([A-Z0-9_]+)"\)')
_COMMIT = re.compile(r"Update llama\.cpp to (?:ggerganov|ggml-org)/llama\.cpp@([0-9a-f]{7,40})")


def parse_arg_cpp(text: str) -> dict[str, dict[str, str]]:
    """Every flag spelling in ``arg.cpp`` -> {kind, env?}."""
    out: dict[str, dict[str, str]] = {}
    starts = [m.start() for m in _OPT.finditer(text)] + [len(text)]
    for m, end in zip(_OPT.finditer(text), starts[1:], strict=True):
        names = _NAME.findall(m.group(1))
        chunk = text[m.end():end]
        handler = _HANDLER.search(chunk)
        if not names or handler is None:
            continue
        rec = {"kind": "value" if handler.group(1) else "switch"}
        env = _ENV.search(chunk)
        if env:
            rec["env"] = env.group(1)
        for name in names:
            out[name] = rec
    return out


def _vendored_commit(changelog: str, version: str) -> str | None:
    section = changelog.split(f"## [{version}]", 1)
    if len(section) < 2:
        return None
    m = _COMMIT.search(section[1].split("\n## [", 1)[0])
    return m.group(1) if m else None


def _unpacked(version: str, root: Path) -> Path:
    base = root / version
    found = list(base.glob("*/vendor/llama.cpp/common/arg.cpp"))
    if found:
        return found[0].parents[3]
    base.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"llama-cpp-python=={version}", "-d", str(base)], check=True, capture_output=True)
    with tarfile.open(next(base.glob("*.tar.gz"))) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.endswith(("vendor/llama.cpp/common/arg.cpp", "/CHANGELOG.md"))]
        tar.extractall(base, members=members)  # two named text files
    return next(base.glob("*/vendor/llama.cpp/common/arg.cpp")).parents[3]


def generate(versions: list[str], root: Path) -> dict[str, object]:
    """The data file's content for these llama-cpp-python releases (oldest first)."""
    flags: dict[str, dict[str, object]] = {}
    vendored: dict[str, str | None] = {}
    for version in versions:
        src = _unpacked(version, root)
        changelog = (src / "CHANGELOG.md").read_text("utf-8") if (src / "CHANGELOG.md").exists() else ""
        vendored[version] = _vendored_commit(changelog, version)
        for name, rec in parse_arg_cpp((src / "vendor/llama.cpp/common/arg.cpp").read_text("utf-8")).items():
            entry = flags.setdefault(name, {"kind": rec["kind"], "versions": []})
            entry["kind"] = rec["kind"]
            if "env" in rec:
                entry["env"] = rec["env"]
            spans: list[list[str]] = entry["versions"]  # type: ignore[assignment]
            prev = versions[versions.index(version) - 1] if versions.index(version) else None
            if spans and prev is not None and spans[-1][1] == prev:
                spans[-1][1] = version
            else:
                spans.append([version, version])
    return {
        "engine": "llama.cpp",
        "generated_by": "tools/gen_llamacpp_args.py",
        "note": ("Flags of llama.cpp's common/arg.cpp per sampled release. Samples are llama-cpp-python "
                 "sdists from PyPI, which vendor llama.cpp; 'vendored' names the llama.cpp commit of each."),
        "samples": versions,
        "vendored": vendored,
        "flags": dict(sorted(flags.items())),
    }


def main(argv: list[str]) -> int:
    root = Path(tempfile.mkdtemp())
    if argv[:1] == ["--from"]:
        root, argv = Path(argv[1]), argv[2:]
    json.dump(generate(argv, root), sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
