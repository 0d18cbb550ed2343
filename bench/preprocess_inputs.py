"""Writes the images bench/preprocess.sh sends (photo-like, as tests/python/test_image_classify_preprocess.py
makes them) and a perf_analyzer --input-data JSON file for each: OUT/{640x480,1920x1080}.{jpg,png}
and OUT/<name>.json. Usage: python3 preprocess_inputs.py OUT"""
import base64
import io
import json
import os
import sys

import numpy as np
from PIL import Image


def photo(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 128 + 100 * np.sin(x / (w / 7.0)) * np.cos(y / (h / 5.0))
    a = np.stack([r, 255 * x / (w - 1), 255 * y / (h - 1)], axis=-1)
    for _ in range(6):
        cx, cy, rad = rng.integers(0, w), rng.integers(0, h), rng.integers(4, min(w, h) // 3)
        a[(x - cx) ** 2 + (y - cy) ** 2 < rad**2] = rng.integers(0, 256, 3)
    a += rng.normal(0, 6, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for w, h in [(640, 480), (1920, 1080)]:
    img = photo(w, h, w)
    for ext, fmt, kw in [("jpg", "JPEG", {"quality": 90}), ("png", "PNG", {})]:
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        data = buf.getvalue()
        name = f"{w}x{h}.{ext}"
        open(os.path.join(out, name), "wb").write(data)
        # perf_analyzer sends a BYTES "b64" value as the tensor's serialized contents: a 4-byte
        # little-endian length, then the bytes.
        raw = len(data).to_bytes(4, "little") + data
        entry = {"IMAGE": {"b64": base64.b64encode(raw).decode(), "shape": [1]}}
        json.dump({"data": [entry]}, open(os.path.join(out, name + ".json"), "w"))
        print(name, len(data))
