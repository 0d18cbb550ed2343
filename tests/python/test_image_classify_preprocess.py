"""image_classify_preprocess (plugins/image_classify_preprocess) against Pillow + numpy, with Triton's
clients over HTTP and gRPC.

The reference is the torchvision-style preprocessing written with Pillow and numpy:
Image.open(f).convert("RGB"), resize so the shorter side is 256 (the longer floor(long * 256 /
short)) with Image.BILINEAR, centre crop 224 at ((w - 224) // 2, (h - 224) // 2), / 255, minus
ImageNet's mean, over its std, channels first.

Tolerance, in the normalised output (one 8-bit level is 1/255/std = 0.017-0.0175):
- PNG: the model's resize is Pillow's (same coefficients, same 22-bit fixed point, each pass rounded
  to 8 bits, horizontal pass first), so most PNGs match to float rounding (error 0). Pillow 13 runs
  the vertical pass first for some sizes (300x1000 here; its rule is not replicated), which moves
  the intermediate rounding by at most one level: max abs error 0.018 (one level), mean 0.006.
- JPEG: Pillow decodes with libjpeg-turbo, the model with jpeg-decoder; their inverse DCTs and chroma
  upsampling differ by a level or two on some pixels, and resizing averages most of that away.
  Measured on these images: max abs error 0.052 (3 levels), mean abs error 0.002 (0.1 level); with
  the model's `jpeg_decoder: "zune"` 0.070 and 0.0063. Bounds: max 0.15 (about 9 levels), mean 0.01,
  room for other encoders' images without admitting a wrong colour conversion or geometry (a
  one-pixel shift of the crop gives max errors above 1 on these pictures).
- 16-bit grey (I;16) PNG: the model keeps the high byte (v >> 8); Pillow's convert("RGB") of an I;16
  image clips at 255 instead (any value above 255 turns white), so the reference is built from
  np.asarray(img) >> 8 there.
- Alpha is dropped (as convert("RGB") does). EXIF orientation is not applied (neither does
  Image.open): a JPEG whose EXIF says "rotate" comes out unrotated, as in the reference.

Usage: python test_image_classify_preprocess.py HTTP_URL GRPC_URL
"""

import io
import struct
import sys
import zlib

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException

MODEL = "image_classify_preprocess"
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
PNG_MAX, PNG_MEAN = 0.018, 0.006
JPEG_MAX, JPEG_MEAN = 0.15, 0.01


def reference(data, sixteen_bit=False):
    img = Image.open(io.BytesIO(data))
    if sixteen_bit:
        img = Image.fromarray((np.asarray(img).astype(np.uint16) >> 8).astype(np.uint8))
    img = img.convert("RGB")
    w, h = img.size
    if w <= h:
        size = (256, h * 256 // w)
    else:
        size = (w * 256 // h, 256)
    img = img.resize(size, Image.BILINEAR)
    left, top = (size[0] - 224) // 2, (size[1] - 224) // 2
    img = img.crop((left, top, left + 224, top + 224))
    a = np.asarray(img).astype(np.float32) / 255
    return ((a - MEAN) / STD).transpose(2, 0, 1)


def photo(w, h, seed):
    """A photo-like RGB picture: smooth gradients, shapes with hard edges, and some noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 128 + 100 * np.sin(x / (w / 7.0)) * np.cos(y / (h / 5.0))
    g = 255 * x / max(w - 1, 1)
    b = 255 * y / max(h - 1, 1)
    a = np.stack([r, g, b], axis=-1)
    for _ in range(6):
        cx, cy, rad = rng.integers(0, w), rng.integers(0, h), rng.integers(4, max(5, min(w, h) // 3))
        a[(x - cx) ** 2 + (y - cy) ** 2 < rad**2] = rng.integers(0, 256, 3)
    a += rng.normal(0, 6, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def encode(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def cases():
    base = photo(640, 480, 1)
    yield "jpeg rgb 640x480", encode(base, "JPEG", quality=90), "jpeg"
    yield "jpeg rgb 4:4:4 q95", encode(base, "JPEG", quality=95, subsampling=0), "jpeg"
    yield "jpeg grey", encode(base.convert("L"), "JPEG", quality=90), "jpeg"
    yield "jpeg odd 257x311", encode(photo(257, 311, 2), "JPEG", quality=90), "jpeg"
    yield "jpeg small 100x80 (upscaled)", encode(photo(100, 80, 3), "JPEG", quality=90), "jpeg"
    yield "jpeg 1920x1080", encode(photo(1920, 1080, 4), "JPEG", quality=90), "jpeg"
    yield "png rgb 640x480", encode(base, "PNG"), "png"
    yield "png grey (L)", encode(base.convert("L"), "PNG"), "png"
    yield "png palette (P)", encode(base.convert("P", palette=Image.ADAPTIVE, colors=64), "PNG"), "png"
    pal = base.convert("P", palette=Image.ADAPTIVE, colors=16)
    yield "png palette with transparency", encode(pal, "PNG", transparency=3), "png"
    rgba = base.convert("RGBA")
    alpha = np.asarray(rgba).copy()
    alpha[..., 3] = np.linspace(0, 255, alpha.shape[1], dtype=np.uint8)[None, :]
    yield "png rgba (alpha dropped)", encode(Image.fromarray(alpha, "RGBA"), "PNG"), "png"
    yield "png grey+alpha (LA)", encode(base.convert("LA"), "PNG"), "png"
    g16 = np.asarray(base.convert("L")).astype(np.uint16) * 256 + 77
    yield "png 16-bit grey (I;16)", encode(Image.fromarray(g16), "PNG"), "png16"
    yield "png odd 257x311", encode(photo(257, 311, 5), "PNG"), "png"
    yield "png small 31x45 (upscaled)", encode(photo(31, 45, 6), "PNG"), "png"
    yield "png tall 300x1000", encode(photo(300, 1000, 7), "PNG"), "png"
    yield "png 1920x1080", encode(photo(1920, 1080, 8), "PNG"), "png"
    # More taps than the resize unrolls (a shrink by 10.2: 23 taps a side), and fewer source pixels
    # than taps (an upscale from 2 and 3 pixels).
    yield "png 2600x2600 (23 taps)", encode(photo(2600, 2600, 9), "PNG"), "png"
    yield "png tiny 2x3", encode(photo(2, 3, 10), "PNG"), "png"


def check(name, got, data, kind):
    want = reference(data, sixteen_bit=kind == "png16")
    assert got.shape == (3, 224, 224) and got.dtype == np.float32, (name, got.shape, got.dtype)
    err = np.abs(got - want)
    mx, mean = float(err.max()), float(err.mean())
    limit = (JPEG_MAX, JPEG_MEAN) if kind == "jpeg" else (PNG_MAX, PNG_MEAN)
    print(f"  {name}: max abs error {mx:.5f}, mean {mean:.6f}")
    assert mx <= limit[0] and mean <= limit[1], f"{name}: max {mx} mean {mean}, limits {limit}"
    return mx, mean


def png_header_only(w, h):
    """A PNG that announces w x h grey pixels and holds a few bytes of them."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b"")


def infer(client, mod, images):
    arr = np.array([[d] for d in images], dtype=np.object_)
    inp = mod.InferInput("IMAGE", list(arr.shape), "BYTES")
    inp.set_data_from_numpy(arr)
    return client.infer(MODEL, [inp]).as_numpy("PIXELS")


def expect_400(client, mod, data, words, proto):
    try:
        infer(client, mod, [data])
    except InferenceServerException as e:
        msg = e.message()
        status = str(e.status())
        print(f"  {proto} refused: {status} {msg}")
        assert any(s in status for s in ("400", "INVALID_ARGUMENT")), (status, msg)
        assert all(w in msg for w in words), (words, msg)
        assert "trap" not in msg.lower() and "panic" not in msg.lower(), msg
        return
    raise AssertionError(f"{proto}: expected a 400 for {words}")


def main():
    http_url, grpc_url = sys.argv[1], sys.argv[2]
    all_cases = list(cases())
    worst = {"jpeg": [0.0, 0.0], "png": [0.0, 0.0]}
    for proto, mod, client in [
        ("http", httpclient, httpclient.InferenceServerClient(http_url)),
        ("grpc", grpcclient, grpcclient.InferenceServerClient(grpc_url)),
    ]:
        print(f"{proto}: one image a request")
        for name, data, kind in all_cases:
            got = infer(client, mod, [data])
            assert got.shape == (1, 3, 224, 224), got.shape
            mx, mean = check(name, got[0], data, kind)
            k = "jpeg" if kind == "jpeg" else "png"
            worst[k] = [max(worst[k][0], mx), max(worst[k][1], mean)]
        print(f"{proto}: a batch of 6 in one request")
        batch = all_cases[:3] + all_cases[6:9]
        got = infer(client, mod, [d for _, d, _ in batch])
        assert got.shape == (6, 3, 224, 224), got.shape
        for (name, data, kind), g in zip(batch, got):
            check("batch " + name, g, data, kind)

        # A decompression bomb: a valid PNG header announcing 20000 x 20000 (400 MB of pixels).
        bomb = png_header_only(20000, 20000)
        expect_400(client, mod, bomb, ["IMAGE element 0", "20000×20000", "max_pixels"], proto)
        big_jpeg = encode(Image.new("L", (5000, 4000)), "JPEG")
        expect_400(client, mod, big_jpeg, ["5000×4000", "max_pixels"], proto)
        expect_400(client, mod, b"this is not an image at all", ["IMAGE element 0", "neither a PNG nor a JPEG"], proto)
        expect_400(client, mod, all_cases[0][1][:300], ["IMAGE element 0", "invalid JPEG"], proto)
        expect_400(client, mod, all_cases[6][1][:300], ["IMAGE element 0", "invalid PNG"], proto)
        # A bad element fails its own request only: the model keeps serving.
        got = infer(client, mod, [all_cases[6][1]])
        check("after the errors", got[0], all_cases[6][1], "png")
    print(f"worst JPEG error: max {worst['jpeg'][0]:.5f}, mean {worst['jpeg'][1]:.6f}")
    print(f"worst PNG error: max {worst['png'][0]:.2e}, mean {worst['png'][1]:.2e}")
    print("image_classify_preprocess: OK")


if __name__ == "__main__":
    main()
