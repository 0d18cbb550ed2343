"""qa/L0_batch_input/test.sh: ragged batching — ragged inputs concatenated across a dynamic batch,
every batch input kind the server makes (element counts, accumulated counts with and without a
leading zero, the largest count as a shape, item shapes and their flattening), and a batch output
scattered back in each request's input shape.

As test.sh with BACKENDS=onnx (the TensorRT and PyTorch runs are the same checks on models Nereus
cannot load): the models are Triton's generated `qa_ragged_model_repository` (gen_qa_ragged_models.py)
and `qa_identity_model_repository`'s `onnx_nobatch_zero_1_float32`, edited as test.sh edits them.
"""
import re


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")
    ragged = "qa_ragged_model_repository"

    def copy(repo, name, dest, edits):
        d = env.models.copy(repo, name, models / dest)
        config = d / "config.pbtxt"
        text = config.read_text()
        for pattern, repl, count in edits:
            text = re.sub(pattern, repl, text, count=count)
        config.write_text(text)

    name = lambda old, new: (re.escape(old), new, 0)  # noqa: E731 (sed s/old/new/ on every line)
    copy(ragged, "onnx_batch_input", "ragged_element_count_acc_zero",
         [name("onnx_batch_input", "ragged_element_count_acc_zero")])
    copy(ragged, "onnx_batch_input", "ragged_acc_shape", [
        name("onnx_batch_input", "ragged_acc_shape"),
        name("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT"),
        name("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE"),
    ])
    copy(ragged, "onnx_batch_input", "batch_item_flatten", [
        name("onnx_batch_input", "batch_item_flatten"),
        ("-1", "-1, -1", 1),  # sed "0,/-1/{s/-1/-1, -1/}": the first -1 of the file only
        name("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT"),
        name("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "BATCH_ITEM_SHAPE_FLATTEN"),
    ])
    copy(ragged, "onnx_batch_item", "batch_item", [name("onnx_batch_item", "batch_item")])
    copy("qa_identity_model_repository", "onnx_nobatch_zero_1_float32", "ragged_io", [
        name("onnx_nobatch_zero_1_float32", "ragged_io"),
        (r"(?m)^max_batch_size:.*", "max_batch_size: 4", 0),
        (re.escape('name: "INPUT0"'), 'name: "INPUT0"\nallow_ragged_batch: true', 0),
    ])
    with open(models / "ragged_io" / "config.pbtxt", "a") as f:
        f.write('batch_output [{target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
                'source_input: "INPUT0" }] dynamic_batching { max_queue_delay_microseconds: 1000000 }\n')

    with suite.block("onnx", quick=True) as b:
        b.start([f"--model-repository={models}", "--exit-timeout-secs=120"])
        b.unittest("batch_input_test.py")
