"""The image-classification demo end to end, with Triton's own Python clients over HTTP and gRPC:
the `classify_digit` ensemble (Wasm decode/resize → ONNX classifier → Wasm top-k) must classify each
committed test image (tests/images/digits) as expected.json says, alone and several in one request,
and its PROBABILITIES must match onnxruntime run directly in Python on the PIXELS that the
`digit_preprocess` step produces for the same image (relative tolerance 1e-5). Bytes that are not an
image fail with a 400 naming the step.

Usage: python test_image_classifier.py HTTP_URL GRPC_URL
"""
import json
import os
import sys

import numpy as np
import onnxruntime
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
IMAGES = os.path.join(ROOT, "tests", "images", "digits")
MODEL = os.path.join(ROOT, "model_repository", "digit_classifier", "1", "model.onnx")


def images_input(module, blobs):
    array = np.array([[b] for b in blobs], dtype=np.object_)
    inp = module.InferInput("IMAGE", list(array.shape), "BYTES")
    inp.set_data_from_numpy(array)
    return inp


def main(http_url, grpc_url):
    expected = json.load(open(os.path.join(IMAGES, "expected.json")))
    names = sorted(expected)
    blobs = [open(os.path.join(IMAGES, n), "rb").read() for n in names]
    session = onnxruntime.InferenceSession(MODEL)
    clients = [(httpclient, httpclient.InferenceServerClient(url=http_url)),
               (grpcclient, grpcclient.InferenceServerClient(url=grpc_url))]
    for module, client in clients:
        protocol = module.__name__.split(".")[-1]
        for name, blob in zip(names, blobs):
            result = client.infer("classify_digit", [images_input(module, [blob])])
            labels = [l.decode() for l in result.as_numpy("LABELS")[0]]
            assert labels[0] == expected[name]["label"], f"{protocol} {name}: {labels}"
            pixels = client.infer("digit_preprocess", [images_input(module, [blob])]).as_numpy("PIXELS")
            assert pixels.shape == (1, 1, 8, 8), pixels.shape
            reference = session.run(["PROBABILITIES"], {"PIXELS": pixels})[0]
            np.testing.assert_allclose(result.as_numpy("PROBABILITIES"), reference, rtol=1e-5, atol=1e-7,
                                       err_msg=f"{protocol} {name}")
            top = np.sort(reference[0])[::-1][:3]
            np.testing.assert_allclose(result.as_numpy("TOP_SCORES")[0], top, rtol=1e-6)
        # Eight images (max_batch_size) in one request: one row each, answered in order.
        result = client.infer("classify_digit", [images_input(module, blobs[:8])])
        firsts = [row[0].decode() for row in result.as_numpy("LABELS")]
        assert firsts == [expected[n]["label"] for n in names[:8]], f"{protocol}: {firsts}"
        # Not an image: the client's error, naming the ensemble (as tritonserver words a step's error).
        try:
            client.infer("classify_digit", [images_input(module, [b"GIF89a not supported"])])
            raise AssertionError(f"{protocol}: a GIF was accepted")
        except InferenceServerException as e:
            assert "in ensemble 'classify_digit'" in str(e) and "neither a PNG nor a JPEG" in str(e), str(e)
            if protocol == "http":
                assert e.status() == "400", e.status()
    print(f"image classification demo: {len(names)} images over HTTP and gRPC: 1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
