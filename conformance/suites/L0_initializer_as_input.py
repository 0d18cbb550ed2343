"""qa/L0_initializer_as_input/test.sh: an ONNX initializer declared as an optional input — left
out, the model uses the stored value; given, the request's value replaces it. The model is the
suite's own (qa/L0_initializer_as_input/models/add_with_initializer), served unchanged.
"""

def run(suite):
    p = suite.path
    with suite.block("initializer as input", quick=True) as b:
        b.start([f"--model-repository={p('models')}"])
        b.unittest("test.py")
