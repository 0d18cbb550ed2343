"""Whether this machine has an NVIDIA GPU, for recipes whose test.sh assumes one."""
import shutil
import subprocess


def has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout
