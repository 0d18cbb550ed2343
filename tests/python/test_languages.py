"""Backends written in Python and JavaScript (plugins/python, plugins/js), through Triton's own Python
clients over HTTP and gRPC, against a running nereus serving scripts/test.sh's repository: the
example repository, FP32 and FP64 twins of `add_sub_fp32` for each language (add_sub_fp32_py,
add_sub_fp64, add_sub_fp64_py, ...),
and the fault models faulty_py, faulty_js, hog_py and hog_js (test_faults_py, test_faults_js with a
96 MiB memory cap, and a 300 ms deadline for faulty_*, a minute for hog_*).

- add_sub_py and add_sub_js answer exactly as the Rust add_sub (`simple`, `add_sub_fp32`) on the
  same inputs, INT32 (wrapping) and FP32, with the same errors for inputs of different lengths and
  for a datatype it does not support (FP64);
- tokenizer_py's tokens, ids and lengths are those of the normalisation it documents, computed here
  with Python's own unicodedata and re and the model's vocab.txt; json_fields_js's values are those
  of Python's json; each fails a malformed request alone, also among concurrent ones and within one
  batch of eight requests (their `_batch` twins, whose batcher waits for eight);
- bls_add_sub_py and bls_add_sub_js, calling `simple` twice through their SDK's `infer`, answer what
  the Rust bls_add_sub answers; their twins bls_add_sub_py_denied and bls_add_sub_js_denied, pointed
  at a model their policy does not list, fail with the host's not-allowed error;
- a plugin in either language that loops forever or allocates without bound is stopped by the
  deadline or the memory cap with the sandbox's messages, and the server keeps serving.

Usage: python test_languages.py HOST:HTTP_PORT HOST:GRPC_PORT REPOSITORY
"""
import json
import os
import queue
import re
import sys
import unicodedata
from functools import partial

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

LANGUAGES = ("py", "js")
TIMEOUT_S = 60


class Client:
    """One protocol's client, and how to read response parameters over it."""

    def __init__(self, module, url):
        self.module = module
        self.name = module.__name__.split(".")[-1]
        extra = {"concurrency": 12} if module is httpclient else {}
        self.client = module.InferenceServerClient(url=url, **extra)

    def infer(self, model, tensors, **kwargs):
        return self.client.infer(model, self.inputs(tensors), **kwargs)

    def inputs(self, tensors):
        inputs = []
        for name, array in tensors.items():
            datatype = "BYTES" if array.dtype == np.object_ else {np.int32: "INT32", np.float32: "FP32", np.float64: "FP64"}[array.dtype.type]
            tensor = self.module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return inputs

    def concurrently(self, requests):
        """Sends (model, tensors, _) requests all at once; their (result, error) pairs, in order."""
        if self.name == "http":
            handles = [self.client.async_infer(model, self.inputs(t), request_id=str(k))
                       for k, (model, t, _) in enumerate(requests)]
            answers = []
            for handle in handles:
                try:
                    answers.append((handle.get_result(), None))
                except InferenceServerException as e:
                    answers.append((None, e))
            return answers
        done = queue.Queue()
        for k, (model, t, _) in enumerate(requests):
            self.client.async_infer(model, self.inputs(t), partial(lambda k, result, error: done.put((k, result, error)), k))
        answers = dict((k, (r, e)) for k, r, e in (done.get(timeout=TIMEOUT_S) for _ in requests))
        return [answers[k] for k in range(len(requests))]

    def error(self, model, tensors, **kwargs):
        try:
            self.infer(model, tensors, **kwargs)
        except InferenceServerException as e:
            return e.message()
        raise AssertionError(f"{self.name}: {model} answered a request it should have failed")

    def parameter(self, result, key):
        response = result.get_response()
        if self.name == "http":
            return response["parameters"][key]
        value = response.parameters[key]
        return getattr(value, value.WhichOneof("parameter_choice"))


def check_add_sub(c, rng):
    for lang in LANGUAGES:
        for batch in (1, 3, 8):
            a = rng.integers(-2**31, 2**31, size=(batch, 16), dtype=np.int64).astype(np.int32)
            b = rng.integers(-2**31, 2**31, size=(batch, 16), dtype=np.int64).astype(np.int32)
            a[0, :2], b[0, :2] = [2**31 - 1, -2**31], [1, 1]  # both wrap
            rust = c.infer("simple", {"INPUT0": a, "INPUT1": b})
            ours = c.infer(f"simple_{lang}", {"INPUT0": a, "INPUT1": b})
            with np.errstate(over="ignore"):
                expected = (a + b, a - b)
            for out, want in zip(("OUTPUT0", "OUTPUT1"), expected):
                np.testing.assert_array_equal(ours.as_numpy(out), rust.as_numpy(out))
                np.testing.assert_array_equal(ours.as_numpy(out), want)
        # a requested output alone
        r = c.infer(f"simple_{lang}", {"INPUT0": a, "INPUT1": b}, outputs=[c.module.InferRequestedOutput("OUTPUT1")])
        assert r.as_numpy("OUTPUT0") is None and r.as_numpy("OUTPUT1") is not None

        x = rng.standard_normal(37).astype(np.float32) * 1e6
        y = rng.standard_normal(37).astype(np.float32)
        rust = c.infer("add_sub_fp32", {"INPUT0": x, "INPUT1": y})
        ours = c.infer(f"add_sub_fp32_{lang}", {"INPUT0": x, "INPUT1": y})
        for out, want in zip(("OUTPUT0", "OUTPUT1"), (x + y, x - y)):
            assert ours.as_numpy(out).dtype == np.float32
            assert ours.as_numpy(out).tobytes() == rust.as_numpy(out).tobytes(), (lang, out)
            assert ours.as_numpy(out).tobytes() == want.tobytes(), (lang, out)

        short = {"INPUT0": x[:3], "INPUT1": y[:4]}
        rust_error = c.error("add_sub_fp32", short)
        assert "INPUT0 and INPUT1 must have the same number of elements" in rust_error, rust_error
        assert c.error(f"add_sub_fp32_{lang}", short) == rust_error.replace("add_sub_fp32", f"add_sub_fp32_{lang}")

        # a datatype add_sub does not support: the same error as Rust's
        wide = {"INPUT0": np.ones(2, np.float64), "INPUT1": np.ones(2, np.float64)}
        rust_error = c.error("add_sub_fp64", wide)
        assert "add_sub supports INT32 and FP32, not DataType::Fp64" in rust_error, rust_error
        assert c.error(f"add_sub_fp64_{lang}", wide) == rust_error.replace("add_sub_fp64", f"add_sub_fp64_{lang}")


def read_vocab(repository):
    vocab = {}
    with open(os.path.join(repository, "tokenizer_py", "1", "vocab.txt"), encoding="utf-8") as f:
        for line in f:
            vocab.setdefault(line.rstrip("\n"), len(vocab))
    return vocab


def reference_tokens(text, limit):
    """The normalisation tokenizer_py documents, in this Python."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = unicodedata.normalize("NFC", "".join(ch for ch in unicodedata.normalize("NFD", text)
                                                 if unicodedata.category(ch) != "Mn"))
    tokens = re.findall(r"\w+|[^\w\s]", text)
    return tokens[:limit], len(tokens) > limit


TEXTS = ["Hello, Wörld! The CAFÉ résumé costs 10€.", "ﬁne   naïve\tmodel-server (v2)", "", "ＦＵＬＬ　ｗｉｄｔｈ ½ x²",
         "Ünïcödé inference batch; 100% data/tokens @ user #1"]


def check_tokenizer(c, vocab):
    for limit in (32, 5):
        params = {} if limit == 32 else {"max_tokens": limit}
        text = np.array([[t.encode()] for t in TEXTS], dtype=np.object_)
        r = c.infer("tokenizer_py", {"TEXT": text}, parameters=params)
        rows = [reference_tokens(t, limit) for t in TEXTS]
        width = max(len(tokens) for tokens, _ in rows)
        tokens = r.as_numpy("TOKENS")
        assert tokens.shape == (len(TEXTS), width), tokens.shape
        for i, (want, _) in enumerate(rows):
            padded = want + ["[PAD]"] * (width - len(want))
            assert [t.decode() for t in tokens[i]] == padded, (i, tokens[i], padded)
            assert list(r.as_numpy("IDS")[i]) == [vocab.get(t, vocab["[UNK]"]) for t in padded]
            assert r.as_numpy("LENGTH")[i, 0] == len(want)
        assert r.as_numpy("IDS").dtype == np.int64
        assert c.parameter(r, "truncated") == sum(cut for _, cut in rows)
    # unknown words are [UNK], known ones not
    ids = c.infer("tokenizer_py", {"TEXT": np.array([[b"the zyzzyva"]], dtype=np.object_)}).as_numpy("IDS")
    assert list(ids[0]) == [vocab["the"], vocab["[UNK]"]]

    bad = {"TEXT": np.array([[b"ok"], [b"caf\xe9!"]], dtype=np.object_)}
    try:
        b"caf\xe9!".decode()
    except UnicodeDecodeError as e:
        assert c.error("tokenizer_py", bad) == f"TEXT[1] is not UTF-8: {e.reason} at byte {e.start}"
    e = c.error("tokenizer_py", {"TEXT": np.array([[b"x"]], dtype=np.object_)}, parameters={"max_tokens": 0})
    assert "parameter 'max_tokens' must be an integer from 1 to 512" in e, e


DOCS = [{"user": {"name": "Ann", "tags": ["a", "b"]}, "items": [{"id": 7}, {"id": 8.5}]},
        {"user": {"name": {"first": "Bo", "last": "Li"}}, "items": []},
        {"user": None}, ["not", "an", "object"], {"user": {"name": "Zoë ✓ 🦀"}, "items": [{"id": True}]}]


def reference_field(doc, path):
    value = doc
    for key in path.split("."):
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            return None, False
    return value, True


def check_json_fields(c):
    docs = np.array([[json.dumps(d, ensure_ascii=False).encode()] for d in DOCS], dtype=np.object_)
    for field in (None, "items.0.id", "user.tags", "user"):
        r = c.infer("json_fields_js", {"DOC": docs}, parameters={} if field is None else {"field": field})
        values, found = r.as_numpy("VALUE"), r.as_numpy("FOUND")
        assert found.dtype == np.bool_
        for i, doc in enumerate(DOCS):
            want, present = reference_field(doc, field or "user.name")
            assert found[i, 0] == present, (field, i)
            got = values[i, 0].decode()
            if not present:
                assert got == ""
            elif isinstance(want, str):
                assert got == want
            else:
                assert json.loads(got) == want, (field, i, got, want)
        assert c.parameter(r, "missing") == int((~found).sum())
    bad = {"DOC": np.array([[b'{"user": {}}'], [b"{oops"]], dtype=np.object_)}
    e = c.error("json_fields_js", bad)
    # Then the engine's own words for the parse error (QuickJS's or SpiderMonkey's, which differ).
    prefix = "DOC[1] is not a JSON document: "
    assert e.startswith(prefix) and len(e) > len(prefix), e
    # Malformed UTF-8 (the SDK's decoder where the engine has no TextDecoder): a stray continuation
    # byte, an overlong '/', a surrogate, a character cut short, past U+10FFFF.
    for raw in (b'"\x80"', b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xe2\x9c"', b'"\xf4\x90\x80\x80"'):
        e = c.error("json_fields_js", {"DOC": np.array([[b'{"user": {}}'], [raw]], dtype=np.object_)})
        assert e.startswith(prefix), (raw, e)


def check_isolation(c):
    """Concurrent requests (batched together by the dynamic batcher when they meet): the malformed
    ones fail alone."""
    sent = []
    for k in range(12):
        good = k % 3 != 1
        if k % 2:
            value = json.dumps({"user": {"name": f"n{k}"}}).encode() if good else b"[1,"
            sent.append(("json_fields_js", {"DOC": np.array([[value]], dtype=np.object_)}, good))
        else:
            value = f"request {k}".encode() if good else b"\xff"
            sent.append(("tokenizer_py", {"TEXT": np.array([[value]], dtype=np.object_)}, good))
    for k, ((model, _, good), (result, error)) in enumerate(zip(sent, c.concurrently(sent))):
        if not good:
            assert error is not None and ("not UTF-8" in error.message() or "not a JSON document" in error.message())
        elif model == "tokenizer_py":
            assert error is None, error
            assert [t.decode() for t in result.as_numpy("TOKENS")[0]] == ["request", str(k)]
        else:
            assert error is None, error
            assert result.as_numpy("VALUE")[0, 0] == f"n{k}".encode()


def check_one_batch(c, stats):
    """Eight requests of one row each, which the `_batch` twins' batcher executes in one call: each
    answered on its own, the malformed one failed alone."""
    for model, name, good, bad, check in (
            ("tokenizer_py_batch", "TEXT", lambda k: f"row {k}".encode(), b"\xc3",
             lambda r, k: [t.decode() for t in r.as_numpy("TOKENS")[0]] == ["row", str(k)]),
            ("json_fields_js_batch", "DOC", lambda k: json.dumps({"user": {"name": k}}).encode(), b"{",
             lambda r, k: r.as_numpy("VALUE")[0, 0] == str(k).encode())):
        before = stats(model)["execution_count"]
        sent = [(model, {name: np.array([[bad if k == 3 else good(k)]], dtype=np.object_)}, None) for k in range(8)]
        for k, (result, error) in enumerate(c.concurrently(sent)):
            if k == 3:
                assert error is not None and result is None
            else:
                assert error is None and check(result, k), (model, k, error)
        after = stats(model)
        assert after["execution_count"] == before + 1, (model, before, after)
        assert any(b["batch_size"] == 8 for b in after["batch_stats"]), after["batch_stats"]


def check_bls(c, rng, stats):
    """bls_add_sub_py and bls_add_sub_js (Python and JavaScript calling `simple` twice through their
    SDK) answer what the Rust bls_add_sub answers, (2A, 2B) wrapping; each call is a request of
    simple's own; a call its policy does not allow fails the request with the host's not-allowed
    error, passed on by the SDK."""
    for lang in LANGUAGES:
        for rows in (1, 3):
            a = rng.integers(-2**31, 2**31, size=(rows, 16), dtype=np.int64).astype(np.int32)
            b = rng.integers(-2**31, 2**31, size=(rows, 16), dtype=np.int64).astype(np.int32)
            before = stats("simple")["inference_stats"]["success"]["count"]
            ours = c.infer(f"bls_add_sub_{lang}", {"A": a, "B": b})
            after = stats("simple")["inference_stats"]["success"]["count"]
            assert after == before + 2, (lang, before, after)
            rust = c.infer("bls_add_sub", {"A": a, "B": b})
            with np.errstate(over="ignore"):
                expected = {"SUM2": a + a, "DIFF2": b + b}
            for out, want in expected.items():
                np.testing.assert_array_equal(ours.as_numpy(out), want)
                np.testing.assert_array_equal(ours.as_numpy(out), rust.as_numpy(out))
        one = {"A": np.ones((1, 16), np.int32), "B": np.ones((1, 16), np.int32)}
        error = c.error(f"bls_add_sub_{lang}_denied", one)
        assert error == (f"model 'bls_add_sub_{lang}_denied' may not call model 'simple_{lang}': "
                         "sandbox.callable_models does not list it (not-allowed)"), error


def check_faults(c):
    ints = {"INPUT0": np.array([1, 2, 3], dtype=np.int32)}
    simple = {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)}

    def healthy(model):
        np.testing.assert_array_equal(c.infer(model, ints).as_numpy("OUTPUT0"), [1, 2, 3])
        np.testing.assert_array_equal(c.infer("simple", simple).as_numpy("OUTPUT0"), np.full((1, 16), 2))

    for lang, exception in (("py", "RuntimeError: test_faults_py: exception requested"),
                            ("js", "Error: test_faults_js: exception requested")):
        for model, fault, message in (
                (f"faulty_{lang}", "loop", f"model 'faulty_{lang}' instance 'faulty_{lang}_0' exceeded its execution deadline of 300 ms"),
                (f"hog_{lang}", "oom", f"model 'hog_{lang}' instance 'hog_{lang}_0' exceeded its memory limit of 96 MiB"),
                (f"faulty_{lang}", "raise" if lang == "py" else "throw", exception)):
            healthy(model)
            error = c.error(model, ints, parameters={"fault": fault})
            assert error == message, (model, fault, error)
            healthy(model)
            assert c.client.is_model_ready(model)
    # Answers the JavaScript bindings cannot take fail their request with the SDK's words, not a trap.
    for fault, message in (("promise", "TypeError: handle returned a Promise: it must answer synchronously"),
                           ("not_a_tensor", 'TypeError: output "OUTPUT0" is not a tensor { name, datatype, shape, data: Uint8Array }')):
        error = c.error("faulty_js", ints, parameters={"fault": fault})
        assert error == message, (fault, error)
        healthy("faulty_js")


def main(http_url, grpc_url, repository):
    rng = np.random.default_rng(26)
    vocab = read_vocab(repository)
    statistics = httpclient.InferenceServerClient(url=http_url)

    def stats(model):
        return statistics.get_inference_statistics(model)["model_stats"][0]
    for client in (Client(httpclient, http_url), Client(grpcclient, grpc_url)):
        check_add_sub(client, rng)
        check_tokenizer(client, vocab)
        check_json_fields(client)
        check_isolation(client)
        check_one_batch(client, stats)
        check_faults(client)
        check_bls(client, rng, stats)
        print(f"languages ({client.name}): add_sub, tokenizer_py, json_fields_js (also one batch of eight requests), "
              "bls_add_sub_py, bls_add_sub_js and the faults of both languages: ok")


if __name__ == "__main__":
    main(*sys.argv[1:4])
