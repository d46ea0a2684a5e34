"""The gettext catalog of oomdoctor's texts that are code: extract, check, compile.

    python tools/i18n_catalog.py extract   # rewrite oomdoctor/locale/oomdoctor.pot from the code
    python tools/i18n_catalog.py compile   # oomdoctor/locale/*/LC_MESSAGES/oomdoctor.po -> .mo
    python tools/i18n_catalog.py check     # exit 1 when a message lacks a translation or a .mo is stale

A development tool (standard library only): messages are the string literals passed to ``_()`` or
``N_()`` under ``oomdoctor/``; the .po files are edited by hand (or with Babel / Poedit) and the
compiled .mo files are committed, so the wheel needs nothing at run time but :mod:`gettext`.
tests/test_i18n.py runs the checks.
"""

from __future__ import annotations

import ast
import string
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "oomdoctor"
LOCALE = PACKAGE / "locale"
DOMAIN = "oomdoctor"
MARKERS = ("_", "N_")


def extract(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Every message of the code, with where it is used (``path:line``)."""
    out: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in MARKERS
                and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                out.setdefault(node.args[0].value, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _unquote(token: str) -> str:
    return ast.literal_eval(token)


def read_po(path: Path) -> dict[str, str]:
    """msgid -> msgstr of a .po file (the header entry under "")."""
    entries: dict[str, str] = {}
    msgid: list[str] | None = None
    msgstr: list[str] | None = None
    current: list[str] | None = None

    def flush() -> None:
        if msgid is not None and msgstr is not None:
            key = "".join(msgid)
            if key in entries:  # gettext would keep one silently; a second translation is a mistake
                raise ValueError(f"{path}: msgid {key!r} appears twice")
            entries[key] = "".join(msgstr)

    for raw in path.read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("msgid "):
            flush()
            msgid, msgstr = [_unquote(line[6:])], None
            current = msgid
        elif line.startswith("msgstr "):
            msgstr = [_unquote(line[7:])]
            current = msgstr
        elif line.startswith('"') and current is not None:
            current.append(_unquote(line))
        else:
            raise ValueError(f"{path}: cannot read {raw!r}")
    flush()
    return entries


def mo_bytes(catalog: dict[str, str]) -> bytes:
    """The GNU .mo image of ``catalog`` (no hash table, as msgfmt -no-hash; gettext reads it)."""
    keys = sorted(catalog)
    ids = [k.encode("utf-8") for k in keys]
    strs = [catalog[k].encode("utf-8") for k in keys]
    n = len(keys)
    start = 7 * 4 + 16 * n
    offsets_ids, offsets_strs, blob = [], [], b""
    for b in ids:
        offsets_ids.append((len(b), start + len(blob)))
        blob += b + b"\0"
    for b in strs:
        offsets_strs.append((len(b), start + len(blob)))
        blob += b + b"\0"
    head = struct.pack("<7I", 0x950412DE, 0, n, 7 * 4, 7 * 4 + 8 * n, 0, 0)
    table = b"".join(struct.pack("<2I", *o) for o in offsets_ids) + b"".join(struct.pack("<2I", *o) for o in offsets_strs)
    return head + table + blob


def po_files() -> list[Path]:
    return sorted(LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))


def translated(po: Path) -> dict[str, str]:
    """The entries of ``po`` that a .mo holds: the header and every non-empty translation."""
    return {k: v for k, v in read_po(po).items() if v}


def _fields(text: str) -> set[str]:
    return {f"{n}:{s}" for _, n, s, _ in string.Formatter().parse(text) if n is not None}


def problems(po: Path, messages: dict[str, list[str]] | None = None) -> list[str]:
    """What is wrong with ``po``: a message of the code missing or untranslated, a stale entry no
    code uses, a translation whose {placeholders} differ, a .mo not compiled from it."""
    messages = extract() if messages is None else messages
    entries = read_po(po)
    out = []
    for msg, where in messages.items():
        if not entries.get(msg):
            out.append(f"{po.relative_to(ROOT)}: no translation of {msg!r} ({where[0]})")
        elif _fields(msg) != _fields(entries[msg]):
            out.append(f"{po.relative_to(ROOT)}: {msg!r}: placeholders {sorted(_fields(entries[msg]))} differ from {sorted(_fields(msg))}")
    for msg in entries:
        if msg and msg not in messages:
            out.append(f"{po.relative_to(ROOT)}: stale entry {msg!r} (no code uses it)")
    mo = po.with_suffix(".mo")
    if not mo.exists() or mo.read_bytes() != mo_bytes(translated(po)):
        out.append(f"{mo.relative_to(ROOT)} is not compiled from {po.name}: run python tools/i18n_catalog.py compile")
    return out


def write_pot(messages: dict[str, list[str]]) -> Path:
    path = LOCALE / f"{DOMAIN}.pot"
    parts = ['msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n']
    for msg, where in messages.items():
        parts.append("".join(f"#: {w}\n" for w in where) + f"msgid {_quote(msg)}\nmsgstr \"\"\n")
    path.write_text("\n".join(parts), "utf-8")
    return path


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "extract":
        print(f"wrote {write_pot(extract())}")
        return 0
    if command == "compile":
        for po in po_files():
            po.with_suffix(".mo").write_bytes(mo_bytes(translated(po)))
            print(f"compiled {po.relative_to(ROOT)}")
        return 0
    if command == "check":
        found = [p for po in po_files() for p in problems(po)]
        print("\n".join(found) or "catalogs complete and compiled")
        return 1 if found else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
