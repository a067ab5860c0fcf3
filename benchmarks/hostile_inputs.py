"""How long stepwise takes to refuse (or accept) hostile input: the fuzz test's inflated forms.

    .venv/bin/python benchmarks/hostile_inputs.py [--max-seconds 30] [--json]

tests/security/test_fuzz.py checks that every mutated input ends with exit 0, 2 or 3, no
traceback and nothing written; how long that takes is measured here, not asserted there (a
test's wall clock depends on what else the machine runs). Each form below is prepended to (or
replaces) examples/classic.yaml with its catalog copied beside it, and each command runs as a
fresh `stepwise` process: its exit code, wall time and peak RSS are printed. The run exits 1
when a form took longer than --max-seconds (the bound the fuzz test asserted before).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
STEPWISE = Path(sys.executable).parent / "stepwise"


def _bomb() -> str:
    """A billion laughs: nine references per level, nine levels."""
    return "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )


#: name -> how the deployment's text is made from classic.yaml's
FORMS = {
    "as is": lambda text: text,
    "billion laughs": lambda text: _bomb() + text,
    "20,000 nested [": lambda text: "x: " + "[" * 20_000 + "\n" + text,
    "anchor with a huge count": lambda text: (
        "shared: &s {count: 99999999999, name: 'c{index}'}\n" + text
    ),
    "70,000-character name": lambda text: text.replace("name: ", "name: " + "a" * 70_000, 1),
    "truncated": lambda text: text[: len(text) // 2],
}
COMMANDS = [["validate"], ["plan", "update"], ["plan", "upgrade"]]


def _run(args: list[str]) -> tuple[int, float, float]:
    """Exit code, wall seconds and the peak RSS (MiB) of the children so far."""
    t0 = time.perf_counter()
    r = subprocess.run([str(STEPWISE), *args], capture_output=True, timeout=600)
    took = time.perf_counter() - t0
    return r.returncode, took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-seconds", type=float, default=30.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    classic = (EXAMPLES / "classic.yaml").read_text()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        shutil.copytree(EXAMPLES / "catalog", root / "catalog")
        for name, make in FORMS.items():
            dep = root / "d.yaml"
            dep.write_text(make(classic))
            for cmd in COMMANDS:
                code, took, rss = _run([*cmd, "-d", str(dep)])
                rows.append({"form": name, "command": " ".join(cmd), "exit": code, "seconds": took})
                if not a.json:
                    print(
                        f"{name:<26} {' '.join(cmd):<14} exit {code}  {took:6.2f} s  "
                        f"(peak RSS of any run so far {rss:.0f} MiB)"
                    )
    worst = max(rows, key=lambda r: r["seconds"])
    if a.json:
        print(json.dumps({"runs": rows, "worst": worst}, indent=2))
    else:
        print(f"worst: {worst['form']}, {worst['command']}: {worst['seconds']:.2f} s")
    slow = [r for r in rows if r["seconds"] > a.max_seconds]
    bad_exit = [r for r in rows if r["exit"] not in (0, 2, 3)]
    for r in slow:
        print(f"over {a.max_seconds:.0f} s: {r['form']}, {r['command']}", file=sys.stderr)
    for r in bad_exit:
        print(f"exit {r['exit']}: {r['form']}, {r['command']}", file=sys.stderr)
    return 1 if slow or bad_exit else 0


if __name__ == "__main__":
    sys.exit(main())
