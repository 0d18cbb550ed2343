"""Runs Triton's QA suites against nereus: `python -m harness --qa QA --nereus BIN [SUITE...]`.
conformance/run.sh is the command to use; it installs what this needs and calls it."""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from .core import FAIL, PASS, SKIP, Env, Suite
from .models import Models
from .report import KnownFailures, markdown, skip_list, summarize, table

HERE = Path(__file__).resolve().parent.parent  # conformance/
SUITES = HERE / "suites"
DOCS_BEGIN = "<!-- conformance:begin -->"
DOCS_END = "<!-- conformance:end -->"


def load(name: str):
    path = SUITES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"suites.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(prog="conformance/run.sh")
    ap.add_argument("--qa", required=True, type=Path, help="Triton's qa/ folder")
    ap.add_argument("--nereus", required=True, type=Path, help="the nereus binary")
    ap.add_argument("--work", required=True, type=Path, help="where suites run and models are kept")
    ap.add_argument("--gen-python", default=sys.executable,
                    help="the Python that runs Triton's model generators (with a pinned onnx)")
    ap.add_argument("--quick", action="store_true", help="only the quick subset (CI)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case as it ends")
    ap.add_argument("--json", type=Path, help="write every case's outcome here")
    ap.add_argument("--block", help="only the blocks (server runs) whose label contains this")
    ap.add_argument("--update-docs", type=Path,
                    help="replace the results section of this Markdown file (docs/compatibility.md)")
    ap.add_argument("suites", nargs="*", help="suites to run (default: all with a recipe)")
    a = ap.parse_args()

    names = a.suites or sorted(p.stem for p in SUITES.glob("L*_*.py"))
    qa = a.qa.resolve()
    work = a.work.resolve()
    env = Env(qa=qa, nereus=a.nereus.resolve(), python=sys.executable, work=work / "suites",
              models=Models(qa, a.gen_python, work / "models"), quick=a.quick,
              verbose=a.verbose, block=a.block)
    env.work.mkdir(parents=True, exist_ok=True)
    known = KnownFailures(HERE / "known_failures.txt")

    cases = []
    started = time.monotonic()
    for name in names:
        if not (SUITES / f"{name}.py").exists():
            print(f"no recipe for {name} (conformance/suites/{name}.py)", file=sys.stderr)
            return 2
        if not (qa / name).is_dir():
            print(f"{qa / name} does not exist", file=sys.stderr)
            return 2
        print(f"== {name}{' (quick subset)' if a.quick else ''}", flush=True)
        t = time.monotonic()
        suite = Suite(env, name)
        load(name).run(suite)
        cases += suite.cases
        n = {k: sum(c.status == k for c in suite.cases) for k in (PASS, FAIL, SKIP)}
        print(f"   {name}: {n[PASS]} passed; {n[FAIL]} failed; {n[SKIP]} skipped "
              f"({time.monotonic() - t:.0f} s)", flush=True)

    suites, unexpected, fixed = summarize(cases, known)
    print(f"\n{table(suites)}\n")
    known_fails = [c for c in cases if c.status == FAIL and c.known]
    if known_fails:
        print("Known failures (conformance/known_failures.txt):")
        for c in known_fails:
            print(f"  {c.suite} {c.id}: {c.known}")
    skips = skip_list(cases)
    if skips and a.quick:
        print(f"\n{sum(c.status == SKIP for c in cases)} skipped (the full run lists them by reason)")
    elif skips:
        print("\nSkipped, by reason:")
        print(skips)
    if fixed:
        print("\nKnown failures that passed (take them off conformance/known_failures.txt):")
        for c in fixed:
            print(f"  {c.suite} {c.id}")
    if unexpected:
        print("\nUnexpected failures:")
        for c in unexpected:
            print(f"\n--- {c.suite} {c.id}\n{c.detail}")
    if a.json:
        a.json.write_text(json.dumps([c.__dict__ for c in cases], indent=1))
    if a.update_docs:
        update_docs(a.update_docs, markdown(cases, suites, results_header(qa, a.quick)))
    passed = sum(c.status == PASS for c in cases)
    failed = sum(c.status == FAIL for c in cases)
    skipped = sum(c.status == SKIP for c in cases)
    # Not a test runner's "N passed, N failed" line: the known failures are expected, and CI
    # reads such lines as a runner's verdict.
    print(f"\nconformance: {passed} passed; {failed - len(unexpected)} failed as known_failures.txt "
          f"expects, {len(unexpected)} unexpectedly; {skipped} skipped ({time.monotonic() - started:.0f} s)")
    return 1 if unexpected else 0


def results_header(qa: Path, quick: bool) -> str:
    commit = (qa.parent / "COMMIT").read_text().strip() if (qa.parent / "COMMIT").exists() else "?"
    scope = "the quick subset" if quick else "the full run"
    return (f"Triton's QA suites (triton-inference-server/server `qa/` at `{commit[:12]}`) against "
            f"nereus, {scope} of `conformance/run.sh`:")


def update_docs(path: Path, text: str):
    doc = path.read_text()
    if DOCS_BEGIN not in doc or DOCS_END not in doc:
        raise SystemExit(f"{path} has no {DOCS_BEGIN} ... {DOCS_END} section")
    head, rest = doc.split(DOCS_BEGIN, 1)
    _, tail = rest.split(DOCS_END, 1)
    path.write_text(f"{head}{DOCS_BEGIN}\n{text}{DOCS_END}{tail}")


if __name__ == "__main__":
    sys.exit(main())
