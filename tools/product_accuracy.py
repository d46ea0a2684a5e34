#!/usr/bin/env python3
"""How often oomdoctor names the product the user runs, against the corpus's expert labels.

For each ``<corpus>/<case>/log.txt`` whose ``label.json`` has a ``product`` (not-oom cases have
none), run ``oomdoctor --format json`` and compare the first error finding's ``product`` with the
label. Prints the accuracy, the recall of each labelled product and every miss.

    tools/product_accuracy.py [--corpus DIR] [--heldout FILE] [--split tune|heldout|all]
                              [--in-process] [--engine-baseline] [-v]

``--heldout FILE`` lists case ids set aside (one a line): ``--split tune`` (the default) scores the
others, ``--split heldout`` only those. ``--in-process`` calls ``oomdoctor.diagnose`` instead of
the command line (the same report, several times faster). ``--engine-baseline`` scores the naive
answer "the finding's engine is the product" (what a report said before it had a product).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

#: engine name -> the product id a report that knew only the engine would have meant
_ENGINE_AS_PRODUCT = {"vllm": "vllm-serve", "tensorrt-llm": "trtllm"}


def _report(log: Path, in_process: bool) -> dict[str, Any]:
    if in_process:
        import oomdoctor

        return json.loads(oomdoctor.diagnose(log.read_bytes(), source=str(log)).model_dump_json())
    exe = shutil.which("oomdoctor")
    cmd = [exe] if exe else [sys.executable, "-m", "oomdoctor"]
    out = subprocess.run([*cmd, "--format", "json", str(log)], capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(f"oomdoctor failed on {log}: {out.stderr.strip()}")
    return json.loads(out.stdout)


#: what a report without an error finding answers (the failure itself was missed)
NO_FINDING = "(no error finding)"


def product_of(report: dict[str, Any], engine_baseline: bool = False) -> str | None:
    """The first error finding's product (:data:`NO_FINDING` without an error finding)."""
    for f in report.get("findings", []):
        if f.get("severity") == "error":
            if engine_baseline:
                return _ENGINE_AS_PRODUCT.get(f.get("engine"), f.get("engine"))
            return f.get("product")
    return NO_FINDING


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=root.parent / "shared" / "corpus")
    ap.add_argument("--heldout", type=Path, default=None, help="case ids set aside, one a line")
    ap.add_argument("--split", choices=("tune", "heldout", "all"), default="tune")
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--engine-baseline", action="store_true")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case, not only the misses")
    args = ap.parse_args(argv)

    held = set(args.heldout.read_text().split()) if args.heldout else set()
    if args.split == "heldout" and not held:
        ap.error("--split heldout needs --heldout FILE")
    cases: list[tuple[str, Path, str]] = []
    for label_path in sorted(args.corpus.glob("*/label.json")):
        case = label_path.parent.name
        if (case in held) != (args.split == "heldout") and args.split != "all":
            continue
        label = json.loads(label_path.read_text())
        if label.get("product"):
            cases.append((case, label_path.with_name("log.txt"), label["product"]))

    def run(item: tuple[str, Path, str]) -> tuple[str, str, str | None]:
        case, log, want = item
        return case, want, product_of(_report(log, args.in_process), args.engine_baseline)

    with ThreadPoolExecutor(max_workers=1 if args.in_process else max(1, args.jobs)) as pool:
        results = list(pool.map(run, cases))

    total: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    misses: Counter[tuple[str, str | None]] = Counter()
    for case, want, got in results:
        total[want] += 1
        ok = got == want
        hit[want] += ok
        if not ok:
            misses[(want, got)] += 1
        if args.verbose or not ok:
            print(f"{'ok  ' if ok else 'MISS'} {case:24} label {want:24} tool {got}")
    n, k = sum(total.values()), sum(hit.values())
    found = sum(got != NO_FINDING for _, _, got in results)
    print(f"\n{args.split}: {k}/{n} = {k / max(n, 1):.1%}"
          f"  (of the {found} with an error finding: {k / max(found, 1):.1%})")
    print("\nper product (label): hits/total")
    for prod, t in total.most_common():
        print(f"  {prod:24} {hit[prod]:3}/{t}")
    if misses:
        print("\nconfusion of the misses (label -> tool): count")
        for (want, got), c in misses.most_common():
            print(f"  {want:24} -> {got!s:24} {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
