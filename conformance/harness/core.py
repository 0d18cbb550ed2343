"""The harness's moving parts: a suite's work folder laid out as Triton's qa/ expects, the server
started and stopped as qa/common/util.sh does it, and Triton's Python tests run unchanged, each
recorded as a case (pass, fail or skip, with why).

A recipe (conformance/suites/L0_*.py) re-expresses one qa/L0_*/test.sh: which models, which server
flags, which test invocations, which log checks. It does so in blocks, one per server run of the
test.sh, so a server that fails to start fails the cases of its block and the next block goes on.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

PASS, FAIL, SKIP = "pass", "fail", "skip"

# Flags nereus always gets in place of tritonserver: Triton's tests check the server's name,
# tritonserver's "triton" (Nereus's is "nereus" unless --id says otherwise).
SERVE_ARGS = ["--id", "triton"]

# How long a server may take to become ready, and a test process to finish. tritonserver's
# util.sh waits SERVER_TIMEOUT (120 s) for readiness; Nereus needs a fraction of that.
READY_TIMEOUT = 60.0
# How long a server may stay not ready once every model has settled before the wait gives up.
SETTLED_GRACE = 2.0
# How long one case (one test process) may run; NEREUS_CONFORMANCE_CASE_TIMEOUT shortens it for a
# run against a build that hangs where it fails (a "before" table of an older nereus).
TEST_TIMEOUT = float(os.environ.get("NEREUS_CONFORMANCE_CASE_TIMEOUT", "600"))


@dataclass
class Case:
    """One test case's outcome. `id` is unique within its suite and stable across runs: the known
    failures list (conformance/known_failures.txt) is keyed by it."""

    suite: str
    id: str
    status: str
    detail: str = ""
    # Set by the report when the case is a known failure: the cause from the list.
    known: str | None = None


@dataclass
class Env:
    """What every suite shares: where Triton's qa folder is, the nereus binary, the Python that
    has tritonclient, and the folder suites work in."""

    qa: Path
    nereus: Path
    python: str
    work: Path
    models: "object"  # harness.models.Models
    quick: bool = False
    verbose: bool = False
    # Only blocks whose label contains this run (`--block`), for working on one part of a suite.
    block: str | None = None
    repo_root: Path = Path(__file__).resolve().parents[2]


class ServerStartError(Exception):
    pass


class Server:
    """`nereus serve` started as util.sh's run_server starts tritonserver: its standard output
    (and standard error, unless err_log is given) to a log file in the suite's folder; ready when
    GET localhost:8000/v2/health/ready answers 200 (or live, or merely listening, or not waited
    for, as run_server_tolive and run_server_nowait)."""

    def __init__(self, env: Env, cwd: Path, args: list[str], log: Path, err_log: Path | None,
                 extra_env: dict[str, str] | None = None):
        self.env = env
        self.args = args
        self.log = log
        self.err_log = err_log
        out = open(log, "wb")
        err = open(err_log, "wb") if err_log else subprocess.STDOUT
        child_env = dict(os.environ)
        # tritonserver prints no Rust backtrace; an error's message stays the log's last line.
        child_env.pop("RUST_BACKTRACE", None)
        child_env.pop("RUST_LIB_BACKTRACE", None)
        child_env.update(extra_env or {})
        self.proc = subprocess.Popen([str(env.nereus), "serve", *SERVE_ARGS, *args], cwd=cwd, stdout=out,
                                     stderr=err, stdin=subprocess.DEVNULL, env=child_env)
        out.close()
        if err_log:
            err.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, what: str | None, port: int = 8000, timeout: float = READY_TIMEOUT):
        """Waits until the server is `ready`, `live` or `listening` on `port`; raises
        ServerStartError if it exits or the deadline passes first."""
        if what is None:
            return
        deadline = time.monotonic() + timeout
        path = {"ready": "/v2/health/ready", "live": "/v2/health/live", "listening": "/"}[what]
        settled_since = None
        while time.monotonic() < deadline:
            if not self.running():
                raise ServerStartError(f"nereus exited with status {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                    if r.status == 200 or what == "listening":
                        return
            except urllib.error.HTTPError:
                if what == "listening":
                    return
                # Answering, not ready, and every model READY or UNAVAILABLE for a while: it
                # will not become ready (util.sh would wait out SERVER_TIMEOUT to learn the
                # same). The while: the last model turns READY a moment before the server does.
                if what == "ready" and models_settled(port):
                    settled_since = settled_since or time.monotonic()
                    if time.monotonic() - settled_since > SETTLED_GRACE:
                        raise ServerStartError("nereus is not ready, and every model has settled "
                                               "(READY or UNAVAILABLE)")
                else:
                    settled_since = None
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise ServerStartError(f"nereus was not {what} within {timeout:.0f} s")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait, as test.sh's `kill $SERVER_PID; wait $SERVER_PID`; SIGKILL after
        `timeout`."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def log_text(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        if self.err_log and self.err_log.exists():
            text += self.err_log.read_text(errors="replace")
        return text


def server_version(nereus: Path) -> str:
    """The version nereus reports in its metadata (`nereus --version` prints `nereus X.Y.Z`)."""
    out = subprocess.run([str(nereus), "--version"], capture_output=True, text=True).stdout.split()
    return out[-1] if out else ""


def test_names(path: Path) -> list[str]:
    """`Class.test_name` for every test method of every class in a unittest file, in file order,
    read from its syntax tree (the file is not imported)."""
    tree = ast.parse(path.read_text())
    out = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                # `async def` tests too (unittest.IsolatedAsyncioTestCase).
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    out.append(f"{node.name}.{item.name}")
    return out


_UNITTEST_SKIP = re.compile(r"skipped '(.*)'")


class Suite:
    """One qa/L0_* suite: its work folder and the cases its recipe recorded."""

    def __init__(self, env: Env, name: str):
        self.env = env
        self.name = name
        self.cases: list[Case] = []
        self.qa_dir = env.qa / name
        root = env.work / name
        if root.exists():
            shutil.rmtree(root)
        # Triton's tests find their helpers at ../common and their fixtures beside them or in
        # other qa folders (../python_models, ../custom_models): the work folder is a qa/ of
        # links to the real one, with the suite's own folder made writable (its files linked,
        # its folders copied, since test.sh edits model folders in place).
        self.qa_work = root / "qa"
        self.qa_work.mkdir(parents=True)
        for entry in env.qa.iterdir():
            if entry.name != name:
                (self.qa_work / entry.name).symlink_to(entry)
        self.dir = self.qa_work / name
        self.dir.mkdir()
        if self.qa_dir.is_dir():
            for entry in self.qa_dir.iterdir():
                if entry.is_dir():
                    shutil.copytree(entry, self.dir / entry.name, symlinks=True)
                else:
                    (self.dir / entry.name).symlink_to(entry)
        # `tritonserver` on PATH is nereus, for tests that start the server themselves.
        self.bin = root / "bin"
        self.bin.mkdir()
        shim = self.bin / "tritonserver"
        shim.write_text(f'#!/bin/sh\nexec "{env.nereus}" serve {" ".join(SERVE_ARGS)} "$@"\n')
        shim.chmod(0o755)
        self.test_env = dict(os.environ)
        self.test_env.update({
            # Triton's container sets it to the server's version; tests compare the metadata's.
            "TRITON_SERVER_VERSION": server_version(env.nereus),
            "PATH": f"{self.bin}:{Path(env.python).parent}:{os.environ.get('PATH', '')}",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        })

    def record(self, case_id: str, status: str, detail: str = "") -> Case:
        case = Case(self.name, case_id, status, detail.strip())
        self.cases.append(case)
        if self.env.verbose or status == FAIL:
            mark = {PASS: "ok  ", FAIL: "FAIL", SKIP: "skip"}[status]
            first = case.detail.splitlines()[-1][:160] if case.detail and status != PASS else ""
            print(f"  {mark} {case_id}" + (f": {first}" if first else ""), flush=True)
        return case

    def skip(self, case_id: str, reason: str):
        """A case that needs what Nereus deliberately does not have; `reason` names it."""
        if self.env.block is None:
            self.record(case_id, SKIP, reason)

    def skip_tests(self, test_file: str, tests: Iterable[str], reason: str, label: str = ""):
        for t in tests:
            self.skip(_case_id(label, test_file, t), reason)

    def block(self, label: str, quick: bool = False) -> "Block":
        return Block(self, label, quick)

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)

    def reset(self, *folders: str):
        """`rm -fr X && mkdir X` for each folder of the suite's folder."""
        for f in folders:
            p = self.path(f)
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.exists():
                shutil.rmtree(p)
            p.mkdir(parents=True)


def _case_id(label: str, test_file: str, test: str) -> str:
    base = f"{test_file} {test}"
    return f"{base} [{label}]" if label else base


class Block:
    """One server run of a test.sh: start, the cases against it, stop, the log checks after.
    In --quick mode only blocks marked quick run; the others record nothing."""

    def __init__(self, suite: Suite, label: str, quick: bool):
        self.suite = suite
        self.label = label
        self.active = (quick or not suite.env.quick) and (suite.env.block is None or suite.env.block in label)
        self.servers: list[Server] = []
        self.broken: str | None = None
        self.server: Server | None = None
        # The log of the server started last (what test.sh's $SERVER_LOG names).
        self.log: Path | None = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        for s in self.servers:
            s.stop()
        if kind is KeyboardInterrupt:
            return False
        if kind is not None and self.active:
            import traceback
            detail = "".join(traceback.format_exception(kind, value, tb))
            if self.broken:
                # The recipe went on to talk to a server that never started: say why it did not.
                detail = f"server did not start: {self.broken}\n\n{detail}"
            self.suite.record(f"[{self.label}] recipe", FAIL, detail)
        return kind is not None  # a recipe error fails its block, not the run

    def __bool__(self):
        return self.active

    # --- the server -------------------------------------------------------------------------

    def start(self, args: list[str], wait: str | None = "ready", log: str | None = None,
              err_log: str | None = None, port: int = 8000, extra_env: dict | None = None,
              expect_failure: bool = False) -> Server | None:
        """Starts nereus with tritonserver's `args` (SERVER_ARGS). Unless `expect_failure`, a server
        that exits or is not `wait` in time breaks the block: its cases fail with the log's tail.
        Nothing starts in a block that does not run (--quick, --block)."""
        if not self.active:
            return None
        if log is None:
            # One log per server run, as test.sh's inference_server_$LOG_IDX.log.
            slug = re.sub(r"[^A-Za-z0-9]+", "_", self.label).strip("_")
            log = f"server.{slug}.{len(self.servers)}.log"
        self.log = self.suite.path(log)
        s = Server(self.suite.env, self.suite.dir, args, self.suite.path(log),
                   self.suite.path(err_log) if err_log else None, extra_env)
        self.servers.append(s)
        try:
            s.wait_for(wait, port)
        except ServerStartError as e:
            if expect_failure:
                s.stop()
                return None
            self.broken = f"{e} (nereus serve {' '.join(args)})\n{_tail(s.log_text())}"
            s.stop()
            return None
        if expect_failure:
            return s
        self.server = s
        return s

    def stop(self, server: Server | None = None) -> int | None:
        s = server or self.server
        if s is None:
            return None
        code = s.stop()
        if s in self.servers:
            self.servers.remove(s)
        if s is self.server:
            self.server = None
        return code

    # --- cases ------------------------------------------------------------------------------

    def unittest(self, test_file: str, tests: str | Iterable[str] | None = None,
                 env: dict | None = None, args: list[str] | None = None):
        """`python test_file.py Class.test` for each test (all the file's tests when None), one
        process each, in the suite's folder, as test.sh runs them; exit status 0 is a pass."""
        if tests is None:
            names = test_names(self.suite.qa_dir / test_file)
        elif isinstance(tests, str):
            names = [tests]
        else:
            names = list(tests)
        for t in names:
            self._unittest_one(test_file, t, env, args or [])

    def _unittest_one(self, test_file: str, test: str, env: dict | None, args: list[str]):
        case_id = _case_id(self.label, test_file, test)
        if not self.active:
            return
        if self.broken:
            self.suite.record(case_id, FAIL, "server did not start: " + self.broken)
            return
        p = self.run([self.suite.env.python, test_file, *args, test], env)
        out = p.stdout
        if p.returncode == 0:
            m = _UNITTEST_SKIP.search(out)
            if "OK (skipped=" in out and m:
                self.suite.record(case_id, SKIP, "the test skipped itself: " + m.group(1))
            else:
                self.suite.record(case_id, PASS)
        else:
            self.suite.record(case_id, FAIL, _tail(out, 4000))

    def pytest(self, test_file: str, env: dict | None = None, select: str | None = None):
        """`python -m pytest test_file.py` (as test.sh runs it), one case per test of its JUnit
        report."""
        if not self.active:
            return
        report = self.suite.path(f".{Path(test_file).stem}.{len(self.suite.cases)}.xml")
        cmd = [self.suite.env.python, "-m", "pytest", "-p", "no:cacheprovider", "-q",
               f"--junitxml={report}", test_file]
        if select:
            cmd += ["-k", select]
        if self.broken:
            self.suite.record(_case_id(self.label, test_file, "*"), FAIL,
                              "server did not start: " + self.broken)
            return
        p = self.run(cmd, env)
        if not report.exists():
            self.suite.record(_case_id(self.label, test_file, "*"), FAIL, _tail(p.stdout, 4000))
            return
        for tc in ElementTree.parse(report).getroot().iter("testcase"):
            name = f"{tc.get('classname', '').split('.')[-1]}.{tc.get('name')}"
            case_id = _case_id(self.label, test_file, name)
            bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
            skipped = tc.find("skipped")
            if bad is not None:
                self.suite.record(case_id, FAIL, _tail((bad.get("message") or "") + "\n" +
                                                       (bad.text or ""), 4000))
            elif skipped is not None:
                self.suite.record(case_id, SKIP, "the test skipped itself: " +
                                  (skipped.get("message") or ""))
            else:
                self.suite.record(case_id, PASS)

    def command(self, case_id: str, cmd: list[str], env: dict | None = None,
                ok: Callable[[subprocess.CompletedProcess], bool] | None = None):
        """A program test.sh runs as a test of its own (a client example): a pass when it exits 0
        (or `ok` says so)."""
        if not self.active:
            return
        cid = f"{case_id} [{self.label}]"
        if self.broken:
            self.suite.record(cid, FAIL, "server did not start: " + self.broken)
            return
        p = self.run(cmd, env)
        good = ok(p) if ok else p.returncode == 0
        self.suite.record(cid, PASS if good else FAIL, "" if good else _tail(p.stdout, 3000))

    def check(self, what: str, fn: Callable[[], object]):
        """One of test.sh's own checks (a log line, an endpoint's answer), re-expressed in Python:
        `fn` raises AssertionError (or anything) with why it failed."""
        if not self.active:
            return
        cid = f"test.sh: {what} [{self.label}]"
        if self.broken:
            self.suite.record(cid, FAIL, "server did not start: " + self.broken)
            return
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - any exception is this check's failure
            self.suite.record(cid, FAIL, f"{type(e).__name__}: {e}")
        else:
            self.suite.record(cid, PASS)

    def skip(self, what: str, reason: str):
        if self.active:
            self.suite.skip(f"{what} [{self.label}]", reason)

    def run(self, cmd: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
        child_env = dict(self.suite.test_env)
        child_env.update(env or {})
        if self.server is not None:
            child_env["SERVER_PID"] = str(self.server.pid)
        try:
            return subprocess.run(cmd, cwd=self.suite.dir, env=child_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace",
                                  timeout=TEST_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
            return subprocess.CompletedProcess(cmd, -9, out + f"\n(timed out after {TEST_TIMEOUT} s)")


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def http(method: str, path: str, body: bytes | None = None, port: int = 8000,
         timeout: float = 10.0) -> tuple[int, str]:
    """One request to the server as test.sh's curl makes it: (status, body)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def models_settled(port: int = 8000) -> bool:
    """Whether every model of the repository index is READY or UNAVAILABLE (util.sh's
    wait_for_model_stable condition)."""
    import json
    try:
        status, body = http("POST", "/v2/repository/index", b"{}", port, timeout=5)
        index = json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return False
    if not isinstance(index, list):
        return False
    return all(m.get("state") in ("READY", "UNAVAILABLE") for m in index if "state" in m)


def sed(path: Path, edits: list[tuple[str, str]]):
    """`sed -i s/pattern/repl/` for each (pattern, repl) in turn: the first match on every line,
    as test.sh's edits of model configurations do."""
    lines = path.read_text().split("\n")
    for pattern, repl in edits:
        lines = [re.sub(pattern, repl, line, count=1) for line in lines]
    path.write_text("\n".join(lines))


def wait_until(what: str, cond: Callable[[], bool], timeout: float = 30.0, every: float = 0.1):
    """Polls `cond` until it holds; AssertionError naming `what` at the deadline (test.sh's fixed
    sleeps become polls for the condition they wait for)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - not yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def grep_count(path: Path, pattern: str, regex: bool = True) -> int:
    """`grep -c pattern file` (extended/Perl-ish regex as Python's)."""
    if not path.exists():
        return 0
    rx = re.compile(pattern) if regex else None
    n = 0
    for line in path.read_text(errors="replace").splitlines():
        if (rx.search(line) if rx else pattern in line):
            n += 1
    return n


def install_standin_plugin(name: str, backends: Path):
    """Copies the plugin `name` that stands in for one of Triton's test backends or Python models
    (plugins/<name>, built by conformance/run.sh into $NEREUS_TEST_PLUGINS) to
    `backends/<name>/<name>.wasm`, where `--backend-directory=<backends>` finds it."""
    component = Path(os.environ.get("NEREUS_TEST_PLUGINS", ""), f"{name}.wasm")
    if not component.is_file():
        raise FileNotFoundError(f"the `{name}` plugin is not built: {component} (conformance/run.sh builds it)")
    (backends / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(component, backends / name / f"{name}.wasm")


def python_executable() -> str:
    return sys.executable
