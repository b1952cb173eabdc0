#!/usr/bin/env bash
# specgauge on a GPU machine that has only torch and transformers: install the other dependencies from the
# wheels carried in .whl/ (made here by benchmarks/gpu/fetch_wheels.sh), then run benchmarks/gpu/run.py.
#   benchmarks/gpu/run.sh --out "$OUT"      (about 10 minutes on an H100 / H200; see docs/calibration-gpu.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device: run benchmarks/gpu/run.py --device cpu --shape tiny instead'; print(torch.cuda.get_device_name(0))"
exec python3 benchmarks/gpu/run.py "$@"
