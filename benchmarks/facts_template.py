"""`stepwise facts template` at scale: time, peak memory and the size of the file it writes.

    python benchmarks/facts_template.py [--nodes 100000] [--services 60]

The cloud is `benchmarks.clouds.write_big_cloud` (counted node templates, one catalog file per
service); the command runs in a fresh process, as an operator runs it. Printed: wall and CPU time
and peak RSS of that process, the template's size against the loader's limit
(`model.limits.MAX_FILE_BYTES`: a template larger than that cannot be read back by
`--facts`), and, for comparison, the same dump with PyYAML's pure-Python emitter in this process
(issue 34: a 100,000-node template took 42 s and came within a hair of the limit).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_plan_scale import run_once, stepwise_command  # noqa: E402
from benchmarks.clouds import write_big_cloud  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--services", type=int, default=60)
    ap.add_argument("--python-emitter", action="store_true", help="also time the pure-Python dump")
    args = ap.parse_args()

    from stepwise.model.limits import MAX_FILE_BYTES

    with tempfile.TemporaryDirectory() as tmp:
        dep = write_big_cloud(Path(tmp), args.nodes, args.services)
        out = Path(tmp) / "facts.yaml"
        wall, rss, cpu = run_once(
            [*stepwise_command(), "facts", "template", "-d", str(dep), "-o", str(out)]
        )
        size = out.stat().st_size
        print(
            f"facts template, {args.nodes:,} nodes x {args.services} services: {wall:.1f} s "
            f"({cpu:.1f} s of CPU), "
            f"peak RSS {rss:.0f} MiB, {size / 2**20:.1f} MiB written "
            f"({100 * size / MAX_FILE_BYTES:.0f}% of the loader's {MAX_FILE_BYTES / 2**20:.0f} MiB)"
        )
        if args.python_emitter:
            import yaml

            from stepwise.model import load_deployment
            from stepwise.model.facts_template import facts_template

            doc = facts_template(load_deployment(dep))
            t0 = time.perf_counter()
            yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)
            print(f"pure-Python emitter, same document: {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
