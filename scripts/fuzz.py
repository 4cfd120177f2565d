"""Long fuzzing profile: every public entry point under generated inputs.

Runs the promises of ``tests/helpers/properties.py`` (a documented exception naming the
argument, or finite, valid outputs) for ``--examples`` examples per entry point and
prints a table of examples and failures per entry point.  Unlike the CI profile
(``tests/test_fuzz.py``), a broken promise does not stop the run: it is counted, and its
first message kept.  Each entry point runs in a process of its own, watched by this one,
so a crash (the process killed by a signal) or a hang (no example finished within
``--hang-seconds``) is counted against the entry point that caused it; the run then goes
on in a fresh process with the next seed.

Usage::

    python scripts/fuzz.py --examples 10000              # the long profile (hours)
    python scripts/fuzz.py --examples 200 --only fastep.ep kernels
    python scripts/fuzz.py --examples 10000 --jobs 2 --json fuzz.json

Exit status 0 when no entry point broke its promise, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import signal
import subprocess
import sys
import pickle
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")

#: Table columns for the kinds of broken promise (``properties.Violation.kind``).
GROUPS = {
    "crash": ("crash",),
    "hang": ("hang",),
    "non-finite": ("non-finite output", "runtime warning"),
    "bad exception": ("undocumented exception", "foreign exception", "empty message",
                      "internal message", "message"),
    "invalid value": ("probability", "variance", "range", "symmetry", "diag", "cli"),
}


# ----------------------------------------------------------------------------------------
# the worker: one entry point, one process
# ----------------------------------------------------------------------------------------
def worker(name, examples, seed, dump=None):
    """Run ``examples`` examples of entry point ``name``; one JSON line per example on
    stdout: ``{"s": seconds, "answered": bool, "kind": violation kind or None,
    "detail": message}``.  With ``dump`` (a folder), the call behind the first broken
    promise of each kind is pickled there as ``[fn, args, kwargs]`` for replay."""
    sys.path.insert(0, TESTS)
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    from helpers import properties

    prop = properties.ENTRY_POINTS[name]
    dumped = set()
    out = sys.stdout
    sys.stdout = sys.stderr                     # keep the entry points' prints off the pipe

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data):
        properties.OUTCOMES.clear()
        record = {"answered": False, "kind": None, "detail": ""}
        start = time.perf_counter()
        try:
            prop(data)
        except properties.Violation as exc:
            record["kind"], record["detail"] = exc.kind, str(exc)[:400]
            if dump and exc.kind not in dumped:     # the call that broke it, to replay
                dumped.add(exc.kind)
                path = os.path.join(dump, f"{name.replace('/', '_')}-{len(dumped)}.pkl")
                try:
                    with open(path, "wb") as fh:
                        pickle.dump(properties.LAST_CALL, fh)
                    record["detail"] += f"\n    replay: {path}"
                except Exception:                   # not everything pickles
                    pass
            if exc.__cause__ is not None:           # where the offending exception came from
                frames = traceback.extract_tb(exc.__cause__.__traceback__)[-4:]
                record["detail"] += "\n    at " + " <- ".join(
                    f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                    for f in reversed(frames))
        except Exception as exc:                # an error of the property itself
            record["kind"] = "undocumented exception"
            record["detail"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        record["answered"] = any(o[0] == "answer" for o in properties.OUTCOMES)
        record["s"] = time.perf_counter() - start
        out.write(json.dumps(record) + "\n")
        out.flush()

    run()


# ----------------------------------------------------------------------------------------
# the watcher
# ----------------------------------------------------------------------------------------
class Tally:
    def __init__(self, name):
        self.name = name
        self.examples = 0
        self.answered = 0
        self.kinds = collections.Counter()
        self.first = {}                         # kind -> first message
        self.max_s = 0.0
        self.seconds = 0.0
        self.restarts = 0

    def add(self, record):
        self.examples += 1
        self.answered += bool(record.get("answered"))
        self.max_s = max(self.max_s, record.get("s", 0.0))
        kind = record.get("kind")
        if kind:
            self.kinds[kind] += 1
            self.first.setdefault(kind, record.get("detail", ""))

    def group(self, group):
        return sum(self.kinds[k] for k in GROUPS[group])

    @property
    def failures(self):
        return sum(self.kinds.values())


def watch(name, examples, seed, hang_seconds, dump=None):
    """Run worker processes for entry point ``name`` until ``examples`` examples are
    done, counting crashes and hangs; returns a :class:`Tally`."""
    tally = Tally(name)
    start = time.perf_counter()
    empty_runs = 0
    while tally.examples < examples and empty_runs < 3:
        before = tally.examples
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", name,
             "--examples", str(examples - tally.examples), "--seed", str(seed)]
            + (["--dump", dump] if dump else []),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        hung = False
        while True:
            if not sel.select(timeout=hang_seconds):
                hung = True
                proc.kill()
                break
            line = proc.stdout.readline()
            if not line:
                break
            try:
                tally.add(json.loads(line))
            except json.JSONDecodeError:
                pass
        proc.wait()
        sel.close()
        if hung:
            tally.add({"kind": "hang", "detail": f"no example finished in {hang_seconds} s "
                                                 f"(seed {seed})", "s": hang_seconds})
        elif proc.returncode < 0:
            sig = signal.Signals(-proc.returncode).name
            tally.add({"kind": "crash", "detail": f"killed by {sig} (seed {seed}, example "
                                                  f"{tally.examples - before + 1})"})
        elif proc.returncode != 0:
            tally.add({"kind": "crash", "detail": f"worker exit status {proc.returncode} "
                                                  f"(seed {seed})"})
        elif tally.examples == before:
            empty_runs += 1                     # hypothesis ran out of distinct examples
        if tally.examples < examples:
            tally.restarts += 1
            seed += 1
    tally.seconds = time.perf_counter() - start
    return tally


def table(tallies):
    cols = ["entry point", "examples", "answered", *GROUPS, "max s/example", "minutes"]
    rows = [[t.name, t.examples, t.answered, *(t.group(g) for g in GROUPS),
             f"{t.max_s:.2f}", f"{t.seconds / 60:.1f}"] for t in tallies]
    rows.append(["total", sum(t.examples for t in tallies), sum(t.answered for t in tallies),
                 *(sum(t.group(g) for t in tallies) for g in GROUPS),
                 f"{max(t.max_s for t in tallies):.2f}",
                 f"{sum(t.seconds for t in tallies) / 60:.1f}"])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000,
                        help="examples per entry point (default 1000)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="entry points to run (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="first hypothesis seed")
    parser.add_argument("--jobs", type=int, default=1,
                        help="entry points run at once (default 1)")
    parser.add_argument("--hang-seconds", type=float, default=300.0,
                        help="a worker with no finished example for this long is a hang")
    parser.add_argument("--json", metavar="FILE", help="also write the tallies as JSON")
    parser.add_argument("--dump", metavar="DIR",
                        help="pickle the call behind the first broken promise of each kind "
                             "here, for replay")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.examples, args.seed, args.dump)
        return 0

    sys.path.insert(0, TESTS)
    from helpers import properties
    names = args.only or list(properties.ENTRY_POINTS)
    unknown = sorted(set(names) - set(properties.ENTRY_POINTS))
    if unknown:
        parser.error(f"unknown entry point(s) {unknown}; choose from "
                     f"{list(properties.ENTRY_POINTS)}")
    if args.examples < 1:
        parser.error(f"--examples must be at least 1; got {args.examples}")

    from concurrent.futures import ThreadPoolExecutor
    print(f"fuzzing {len(names)} entry point(s), {args.examples} examples each, "
          f"{args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
        futures = [pool.submit(watch, n, args.examples, args.seed, args.hang_seconds,
                               args.dump) for n in names]
        tallies = []
        for fut in futures:
            t = fut.result()
            tallies.append(t)
            print(f"  {t.name}: {t.examples} examples, {t.answered} answered, "
                  f"{t.failures} broken promises, {t.seconds / 60:.1f} min", flush=True)
    print()
    print(table(tallies))
    broken = [t for t in tallies if t.failures]
    for t in broken:
        print(f"\n{t.name}:")
        for kind, count in t.kinds.most_common():
            print(f"  {count} x {kind}: {t.first[kind]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{"entry_point": t.name, "examples": t.examples, "answered": t.answered,
                        "failures": dict(t.kinds), "first": t.first, "max_s": t.max_s,
                        "seconds": t.seconds, "restarts": t.restarts} for t in tallies],
                      fh, indent=1)
    print("\nresult:", "ok" if not broken else f"{len(broken)} entry point(s) broke "
          "their promise")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
