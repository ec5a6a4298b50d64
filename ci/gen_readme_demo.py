"""Write the README's demo block: what ``preemptlog analyze fixtures/demo`` prints, as it prints it today.

    python ci/gen_readme_demo.py            # rewrite the block in README.md
    python ci/gen_readme_demo.py --check    # exit 1 when the block is stale (tests/house/test_readme.py checks it)

The block is the summary ``preemptlog analyze fixtures/demo --tz UTC -f json -o /dev/null`` writes
on standard error (a pipe: 80 columns, no colour), run from the checkout with no PREEMPTLOG_*
variable set; it sits between "taken after the incident:" and the end of the ``text`` fence.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START = "taken after the incident:\n\n```text\n"
END = "```"


def demo_lines() -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREEMPTLOG_")}
    env.update({"NO_COLOR": "1", "LANG": "C.UTF-8", "TZ": "UTC"})
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", "fixtures/demo", "--tz", "UTC", "-f", "json", "-o", os.devnull],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    return p.stderr


def rewritten(text: str, block: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + block + END + tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the README's block is stale")
    args = ap.parse_args()
    text = README.read_text()
    new = rewritten(text, demo_lines())
    if args.check:
        if new != text:
            print("README.md's demo block is stale: python ci/gen_readme_demo.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
