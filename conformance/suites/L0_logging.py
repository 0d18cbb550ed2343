"""qa/L0_logging/test.sh: log settings from flags and from the logging extension, where log lines
go, their formats, and the Python client library's log-settings calls.

As test.sh, every block serves log_models/simple: Triton's `onnx_int32_int32_int32` (generated)
with versions 2 and 3 removed and renamed. Substitutions:
- test.sh runs Triton's C++ example clients `../clients/simple_http_infer_client` and
  `simple_grpc_infer_client` to make the server log; they are not built here, so Triton's Python
  examples of the same name and job (tests/python/triton_client_examples/, unchanged) run instead.
- `./logging_test`, a gtest of Triton's common library (the log callback), is not a test of the
  server: skipped.
"""
import datetime
import re
import shutil

from harness.core import grep_count, http

CLIENT_EXAMPLES = "tests/python/triton_client_examples"
LOG_LINE = r"^[IWEV][0-9][0-9][0-9][0-9].*"
LOG_REGEX = (r"(?P<month>\d{2})(?P<day>\d{2}) (?P<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) "
             r"(?P<pid>\d+) (?P<file>[\w\.]+):(?P<line>\d+)] (?P<message>.*)")


def run(suite):
    env = suite.env
    models = suite.path("log_models")
    suite.reset("log_models")
    simple = env.models.copy("qa_model_repository", "onnx_int32_int32_int32", models / "simple")
    for v in ("2", "3"):
        shutil.rmtree(simple / v)
    cfg = simple / "config.pbtxt"
    cfg.write_text(re.sub(r'(?m)^name:.*', 'name: "simple"', cfg.read_text()))
    repo = f"--model-repository={models}"

    def clients(b):
        for proto in ("http", "grpc"):
            script = env.repo_root / CLIENT_EXAMPLES / f"simple_{proto}_infer_client.py"
            b.command(f"simple_{proto}_infer_client", [env.python, str(script)])

    def settings(b, log_file, info, warn, error, verbose, fmt):
        """test.sh's verify_correct_settings: GET /v2/logging and grep its body for each field
        written as tritonserver writes it."""
        def check():
            _, body = http("GET", "/v2/logging")
            want = [f'"log_file":"{log_file}"', f'"log_info":{info}', f'"log_warning":{warn}',
                    f'"log_error":{error}', f'"log_verbose_level":{verbose}',
                    f'"log_format":"{fmt}"']
            missing = [w for w in want if body.count(w) != 1]
            assert not missing, f"{missing} not in {body}"
        b.check(f"settings are file={log_file!r} info={info} warning={warn} error={error} "
                f"verbose={verbose} format={fmt}", check)

    def count_at_least(b, path, n, what):
        b.check(what, lambda: _assert(grep_count(suite.path(path), LOG_LINE) >= n,
                                      f"{grep_count(suite.path(path), LOG_LINE)} log lines in {path}, want >= {n}"))

    def count_at_most(b, path, n, what):
        b.check(what, lambda: _assert(grep_count(suite.path(path), LOG_LINE) <= n,
                                      f"{grep_count(suite.path(path), LOG_LINE)} log lines in {path}, want <= {n}"))

    with suite.block("default", quick=True) as b:
        b.start([repo], log="server.log")
        settings(b, "", "true", "true", "true", "0", "default")
        clients(b)
        b.check("the log streams to the console by default (more than 30 lines)",
                lambda: _assert(len(suite.path("server.log").read_text().splitlines()) > 30,
                                f"{len(suite.path('server.log').read_text().splitlines())} lines"))

    with suite.block("log file (argument)") as b:
        b.start(["--log-file=log_file.log", repo], log="inference_server_log_file.log")
        settings(b, "log_file.log", "true", "true", "true", "0", "default")
        clients(b)
        count_at_least(b, "log_file.log", 19, "at least 19 log lines in the --log-file")
        count_at_most(b, "inference_server_log_file.log", 0, "no log line on the console")

    with suite.block("log file (dynamic)") as b:
        suite.path("log_file.log").unlink(missing_ok=True)
        b.start(["--log-file=log_file.log", "--log-verbose=1", repo],
                log="inference_server_log_file.log")

        def refused():
            _, body = http("POST", "/v2/logging", b'{"log_file":"other_log.log"}')
            assert body.count('"error":"log file location can not be updated through network protocol"') == 1, body
        b.check("log_file cannot be changed over the network", refused)
        settings(b, "log_file.log", "true", "true", "true", "1", "default")
        clients(b)
        count_at_least(b, "log_file.log", 75, "at least 75 log lines in the --log-file at verbose 1")
        count_at_most(b, "inference_server_log_file.log", 0, "no log line on the console")

    with suite.block("log info") as b:
        suite.path("log_file.log").unlink(missing_ok=True)
        b.start(["--log-file=log_file.log", "--log-info=false", "--log-verbose=1", repo],
                log="inference_server_log_file.log")
        http("GET", "/v2/logging")
        settings(b, "log_file.log", "false", "true", "true", "1", "default")
        clients(b)
        b.check("no information line with --log-info=false",
                lambda: _assert(grep_count(suite.path("log_file.log"), "Started HTTPService at") == 0,
                                "found 'Started HTTPService at'"))
        http("POST", "/v2/logging", b'{"log_info":true}')
        settings(b, "log_file.log", "true", "true", "true", "1", "default")
        clients(b)
        b.stop()
        b.check("information lines again once log_info is set",
                lambda: _assert(grep_count(suite.path("log_file.log"),
                                           "Waiting for in-flight requests to complete") == 1,
                                "'Waiting for in-flight requests to complete' not logged once"))

    with suite.block("log warning") as b:
        b.start(["--log-warning=false", repo], log="inference_server_log_file.log")
        settings(b, "", "true", "false", "true", "0", "default")
        clients(b)

    with suite.block("log error") as b:
        b.start(["--log-error=false", repo], log="inference_server_log_file.log")
        settings(b, "", "true", "true", "false", "0", "default")
        clients(b)

    with suite.block("log verbose level", quick=True) as b:
        suite.path("log_file.log").unlink(missing_ok=True)
        b.start(["--log-file=log_file.log", "--log-verbose=1", repo],
                log="inference_server_log_file.log")
        http("GET", "/v2/logging")
        settings(b, "log_file.log", "true", "true", "true", "1", "default")
        clients(b)
        b.check("each /v2/logging request logged at verbose 1 (2 lines)",
                lambda: _assert(grep_count(suite.path("log_file.log"), "/v2/logging", False) == 2,
                                f"{grep_count(suite.path('log_file.log'), '/v2/logging', False)} lines"))
        http("POST", "/v2/logging", b'{"log_verbose_level":0}')
        settings(b, "log_file.log", "true", "true", "true", "0", "default")
        http("GET", "/v2/logging")
        b.check("no verbose line after log_verbose_level 0 (at most 3 lines)",
                lambda: _assert(grep_count(suite.path("log_file.log"), "/v2/logging", False) <= 3,
                                f"{grep_count(suite.path('log_file.log'), '/v2/logging', False)} lines"))

    with suite.block("log format") as b:
        suite.path("log_file.log").unlink(missing_ok=True)
        b.start(["--log-file=log_file.log", "--log-verbose=1", "--log-format=ISO8601", repo],
                log="inference_server_log_file.log")
        http("GET", "/v2/logging")
        settings(b, "log_file.log", "true", "true", "true", "1", "ISO8601")
        clients(b)
        today = "I" + datetime.datetime.now().strftime("%m%d")

        def first_field(which):
            lines = suite.path("log_file.log").read_text().splitlines()
            line = lines[0] if which == "first" else lines[-1]
            return line.split()[0] if line.split() else ""
        b.check("ISO8601 lines with --log-format=ISO8601",
                lambda: _assert(first_field("first") != today, "first line is in the default format"))
        http("POST", "/v2/logging", b'{"log_format":"default"}')
        settings(b, "log_file.log", "true", "true", "true", "1", "default")
        b.check("default lines once log_format is set to default",
                lambda: _assert(first_field("last") == today,
                                f"last line starts {first_field('last')!r}, want {today!r}"))

    with suite.block("invalid settings", quick=True) as b:
        # test.sh passes --log-warn: tritonserver's getopt_long takes an unambiguous prefix.
        b.start(["--log-warn=false", repo], log="server.log")
        for param in ("log_info", "log_warning", "log_error"):
            for value, good in (("1", False), ("False", False), ('"false"', False), ("true", True)):
                def check(param=param, value=value, good=good):
                    code, body = http("POST", "/v2/logging", f'{{"{param}":{value}}}'.encode())
                    assert (code == 200) == good, f"{code} {body}"
                b.check(f"{param}={value} answers {'200' if good else 'an error'}", check)
        for value, good in (("-1", False), ('"1"', False), ("0", True)):
            def check(value=value, good=good):
                code, body = http("POST", "/v2/logging", f'{{"log_verbose_level":{value}}}'.encode())
                assert (code == 200) == good, f"{code} {body}"
            b.check(f"log_verbose_level={value} answers {'200' if good else 'an error'}", check)

    with suite.block("python client library", quick=True) as b:
        b.start([repo], log="inference_server_unittest.log")
        b.unittest("logging_endpoint_test.py")

    with suite.block("log formats (the test starts tritonserver itself)") as b:
        b.pytest("log_format_test.py")

    with suite.block("log output stream", quick=True) as b:
        invalid = suite.path("log_models_invalid")
        if invalid.exists():
            shutil.rmtree(invalid)
        shutil.copytree(models, invalid)
        (invalid / "simple" / "1").rename(invalid / "simple" / "01")
        started = b.start(["--log-verbose=1", f"--model-repository={invalid}"],
                          log="inference_server_log_file.log",
                          err_log="inference_server_error_log_file.log", expect_failure=True)
        out, err = suite.path("inference_server_log_file.log"), suite.path("inference_server_error_log_file.log")
        b.check("the server does not become ready with no valid version",
                lambda: _assert(started is None, "the server became ready"))
        b.check("information lines on standard output",
                lambda: _assert(grep_count(out, "I" + LOG_REGEX) > 0, "none"))
        b.check("no warning or error line on standard output",
                lambda: _assert(grep_count(out, "(W|E)" + LOG_REGEX) == 0, "found some"))
        b.check("no information line on standard error",
                lambda: _assert(grep_count(err, "I" + LOG_REGEX) == 0, "found some"))
        b.check("warning lines on standard error",
                lambda: _assert(grep_count(err, "W" + LOG_REGEX) > 0, "none"))
        b.check("error lines on standard error",
                lambda: _assert(grep_count(err, "E" + LOG_REGEX) > 0, "none"))

    suite.skip("logging_test (gtest)", "a C++ unit test of Triton's common library, not of the server")


def _assert(cond, msg):
    if not cond:
        raise AssertionError(msg)
