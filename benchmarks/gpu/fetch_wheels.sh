#!/usr/bin/env bash
# Download (here, where pip reaches PyPI) the wheels specgauge needs beyond torch + transformers on the GPU
# machines (Python 3.12, x86-64; their image lists what it has: /work/.library/device/KINDS.md), into .whl/,
# which the device `run` carries (`echo /.whl/ >> .git/info/exclude` once; name .whl in carry).
# Versions: those of the Python that runs this script ($PY, default: the project's venv), so that pydantic and
# pydantic-core (and the rest) match as they do here.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# not in the image: specgauge's own dependencies and the embedded server's
NAMES="pydantic pydantic-core annotated-types typing-inspection zstandard ijson orjson msgspec plotly fastapi starlette uvicorn"
for p in $NAMES; do
  v=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$p")
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d .whl "$p==$v"
done
ls -la .whl
