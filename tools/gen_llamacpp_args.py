"""Generate ``oomdoctor/data/engine_args/llama.cpp.json``: llama.cpp's command-line flags per release build.

llama.cpp's flags (``llama-server``, ``llama-cli``, ...) are declared in ``common/arg.cpp`` as
``add_opt(common_arg({"-c", "--ctx-size"}, "N", "help", [](common_params & params, int value) {...})
.set_env("LLAMA_ARG_CTX_SIZE"))`` (``llama_arg`` / ``gpt_params`` before about b4000). A handler
taking only ``params`` marks a switch; one taking a value marks a flag that takes a value.

The samples are llama.cpp release builds, the number its programs print first
(``build: 4514 (3edfa7d3) with cc ...``, ``main: build = 4514 (3edfa7d3)``) and tag their releases
with (``b4514``). The npm package node-llama-cpp carries, for each of its releases, the llama.cpp
release it is built on (``llama/binariesGithubRelease.json``) and that release's source as a git
bundle (``llama/gitRelease.bundle``), so each sample is one node-llama-cpp release, recorded with it.

Usage (needs npm, git and the npm registry)::

    python tools/gen_llamacpp_args.py 3.1.1 3.5.0 3.9.0 3.13.0 3.17.1 3.20.0 \\
        > oomdoctor/data/engine_args/llama.cpp.json

or ``--from DIR`` with already unpacked samples ``DIR/<version>/binariesGithubRelease.json`` and
``DIR/<version>/common/arg.cpp``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

_OPT = re.compile(r"add_opt\((?:common_arg|llama_arg)\(\s*(?:\{([^}]*)\}\s*,\s*)?\{([^}]*)\}", re.S)
_NAME = re.compile(r'"(-[^"]+)"')
_HANDLER = re.compile(r"\[\]\((?:common_params|gpt_params)\s*&\s*params\s*(,[^)]*)?\)")
_ENV = re.compile(r'\.set_env\("([A-Z0-9_]+)"\)')
_BUILD = re.compile(r"b(\d+)")


def parse_arg_cpp(text: str) -> dict[str, dict[str, str]]:
    """Every flag spelling in ``arg.cpp`` -> {kind, env?}."""
    out: dict[str, dict[str, str]] = {}
    starts = [m.start() for m in _OPT.finditer(text)] + [len(text)]
    for m, end in zip(_OPT.finditer(text), starts[1:], strict=True):
        # common_arg({"--mmap"}, {"--no-mmap"}, help, [](common_params & params, bool value)): a
        # switch and its negation; otherwise the first braces (when present) are the examples
        positive = _NAME.findall(m.group(1) or "")
        names = positive + _NAME.findall(m.group(2))
        chunk = text[m.end():end]
        handler = _HANDLER.search(chunk)
        if not names or handler is None:
            continue
        pair = bool(positive) and bool(handler.group(1)) and re.match(r",\s*bool\b", handler.group(1)) is not None
        rec = {"kind": "value" if handler.group(1) and not pair else "switch"}
        env = _ENV.search(chunk)
        if env:
            rec["env"] = env.group(1)
        for name in names:
            out[name] = rec
    return out


def _unpacked(version: str, root: Path) -> Path:
    """``root/<version>`` holding node-llama-cpp ``version``'s release tag and ``common/arg.cpp``."""
    base = root / version
    if (base / "common" / "arg.cpp").exists():
        return base
    base.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "pack", f"node-llama-cpp@{version}"], cwd=base, check=True, capture_output=True)
    tgz = next(base.glob("node-llama-cpp-*.tgz"))
    with tarfile.open(tgz) as tar:
        for name in ("package/llama/binariesGithubRelease.json", "package/llama/gitRelease.bundle"):
            member = tar.getmember(name)
            member.name = Path(name).name
            tar.extract(member, base)  # two named files
    subprocess.run(["git", "clone", "-q", str(base / "gitRelease.bundle"), str(base / "src")], check=True)
    (base / "common").mkdir(exist_ok=True)
    shutil.copy(base / "src" / "common" / "arg.cpp", base / "common" / "arg.cpp")
    shutil.rmtree(base / "src")
    for leftover in (tgz, base / "gitRelease.bundle"):
        leftover.unlink()
    return base


def _build_key(tag: str) -> int:
    m = _BUILD.fullmatch(tag)
    if m is None:
        raise ValueError(f"not a llama.cpp build tag: {tag!r}")
    return int(m.group(1))


def generate(versions: list[str], root: Path) -> dict[str, object]:
    """The data file's content for these node-llama-cpp releases (any order: sorted by build)."""
    parsed: list[tuple[str, str, dict[str, dict[str, str]]]] = []
    for version in versions:
        base = _unpacked(version, root)
        tag = json.loads((base / "binariesGithubRelease.json").read_text("utf-8"))["release"]
        _build_key(tag)
        parsed.append((tag, version, parse_arg_cpp((base / "common" / "arg.cpp").read_text("utf-8"))))
    parsed.sort(key=lambda s: _build_key(s[0]))
    samples = [tag for tag, _, _ in parsed]
    flags: dict[str, dict[str, object]] = {}
    for i, (tag, _version, found) in enumerate(parsed):
        for name, rec in found.items():
            entry = flags.setdefault(name, {"kind": rec["kind"], "versions": [], "kinds": {}})
            entry["kind"] = rec["kind"]
            entry["kinds"][tag] = rec["kind"]  # type: ignore[index]
            if "env" in rec:
                entry["env"] = rec["env"]
            spans: list[list[str]] = entry["versions"]  # type: ignore[assignment]
            if spans and i and spans[-1][1] == samples[i - 1]:
                spans[-1][1] = tag
            else:
                spans.append([tag, tag])
    for entry in flags.values():
        if len(set(entry["kinds"].values())) < 2:  # type: ignore[attr-defined]
            del entry["kinds"]  # one kind in every sample: ``kind`` says it
    return {
        "engine": "llama.cpp",
        "generated_by": "tools/gen_llamacpp_args.py",
        "note": ("Flags of llama.cpp's common/arg.cpp per sampled release build (bNNNN, the number its "
                 "programs print as 'build: NNNN (hash)'). Sources: the llama.cpp release bundled in "
                 "node-llama-cpp's npm package; 'node_llama_cpp' names the package release of each."),
        "samples": samples,
        "node_llama_cpp": {tag: version for tag, version, _ in parsed},
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
