"""Performance over the history of the repository, as asv users track it: the asv
benchmarks run on each of the last N commits of a branch (each commit built and installed
into asv's own virtualenv), then published as asv's HTML dashboard.

    pip install ".[bench]"
    python scripts/asv_history.py --commits 10          # then: cd asv_benchmarks && asv preview
    python scripts/asv_history.py --commits 10 --bench "bench_ep.EPFit"

Results go to ``asv_benchmarks/.asv/results`` (a commit already measured on this machine is
skipped: asv's ``--skip-existing-commits``), the dashboard to ``asv_benchmarks/.asv/html``.
By default it runs a short selection (``--bench``, a regular expression on benchmark names)
in asv's quick mode (one sample each), about a minute and a half per commit on two cores
including the build and the first compilation; ``--bench .`` runs them all.  Time nothing else meanwhile:
the numbers are wall-clock times on this machine.

A regression between two commits is what ``asv continuous`` reports (see the user guide's
performance page)::

    cd asv_benchmarks && asv continuous --factor 1.2 --bench bench_ep.EPFit main HEAD
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_benchmarks"

#: The default selection: converged dense EP fits (parallel and sequential, n = 500 to
#: 4,000) and the Gram matrices and their gradient contractions.
DEFAULT_BENCH = r"bench_ep\.(EPFit|Kernels)\."


def commits(branch, count):
    """The last ``count`` commits of ``branch`` (first parents), oldest first."""
    out = subprocess.run(["git", "rev-list", "--first-parent", f"--max-count={count}", branch],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    return out[::-1]


def asv(*args):
    cmd = [sys.executable, "-m", "asv", *args]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ASV_DIR, check=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=10, help="how many commits (default 10)")
    parser.add_argument("--branch", default="HEAD", help="branch or commit to walk back from")
    parser.add_argument("--bench", default=DEFAULT_BENCH,
                        help="benchmarks to run (regular expression; '.' for all)")
    parser.add_argument("--full", action="store_true",
                        help="asv's full sampling instead of --quick (much longer)")
    args = parser.parse_args(argv)
    if args.commits < 1:
        parser.error(f"--commits must be at least 1; got {args.commits}")
    hashes = commits(args.branch, args.commits)
    if not (Path.home() / ".asv-machine.json").exists():
        asv("machine", "--yes")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(hashes) + "\n")
    try:
        asv("run", "--show-stderr", "--skip-existing-commits", "--bench", args.bench,
            *([] if args.full else ["--quick"]), f"HASHFILE:{fh.name}")
    finally:
        os.unlink(fh.name)
    asv("publish")
    print(f"\n{len(hashes)} commits ({hashes[0][:8]}..{hashes[-1][:8]}); dashboard in "
          f"{ASV_DIR / '.asv' / 'html'} (view it with: cd asv_benchmarks && asv preview)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
