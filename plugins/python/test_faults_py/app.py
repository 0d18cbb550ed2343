"""test_faults_py: a Python backend that misbehaves on request, to prove the sandbox holds for
Python as for Rust (plugins/test_faults). INPUT0 INT32 [-1] comes back as OUTPUT0, unless the request
parameter `fault` says "loop" (never returns: the deadline stops it), "oom" (allocates without bound:
the memory cap stops it) or "raise" (an exception: that request fails, with the traceback logged).
"""
import nereus_sdk as nereus


def fail_on_purpose():
    raise RuntimeError("test_faults_py: exception requested")


class Lifecycle(nereus.Backend):
    def handle(self, request):
        fault = request.parameters.get("fault", "")
        if fault == "loop":
            x = 0
            while True:
                x += 1
        if fault == "oom":
            hog = []
            while True:
                hog.append(bytearray(16 << 20))
        if fault == "raise":
            fail_on_purpose()
        x = request.input("INPUT0")
        return [nereus.tensor("OUTPUT0", x.shape, x.datatype, nereus.values(x))]
