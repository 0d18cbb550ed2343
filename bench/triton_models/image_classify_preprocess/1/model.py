"""ImageNet preprocessing with Pillow + numpy, as tests/python/test_image_classify_preprocess.py's
reference: convert("RGB"), shorter side 256 (BILINEAR), centre crop 224, /255, mean/std, CHW."""
import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def preprocess(data):
    img = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = img.size
    size = (256, h * 256 // w) if w <= h else (w * 256 // h, 256)
    img = img.resize(size, Image.BILINEAR)
    left, top = (size[0] - 224) // 2, (size[1] - 224) // 2
    a = np.asarray(img.crop((left, top, left + 224, top + 224)), dtype=np.float32) / 255
    return ((a - MEAN) / STD).transpose(2, 0, 1)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            try:
                out = np.stack([preprocess(bytes(e)) for e in images.reshape(-1)])
                out = out.reshape(images.shape[:-1] + (3, 224, 224))
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", out)]))
            except Exception as e:  # a bad image fails its own request
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"IMAGE: {e}")))
        return responses
