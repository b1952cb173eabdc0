#!/usr/bin/env bash
# The package as a user gets it: `python -m build` makes the sdist and the wheel; the wheel goes into a
# fresh venv (not editable, run from outside the repository, so nothing is imported from src/); the
# short path runs from it: profile and simulate on the shipped sample workload with the shipped tiny
# model's tokenizer, and an HTML report from the shipped template. Every shipped data file (tiny
# models, templates, samples, workarounds) must be in the sdist and installed byte-identical.
# Skips with a WARNING only where it cannot run (no `build`, no venv module, packages not installable);
# any failure of the package itself exits non-zero. About 1-2 min on a loaded 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PY="${PYTHON:-.venv/bin/python}"
WORK="$(mktemp -d -t specgauge-wheel-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
skip() { echo "WARNING: wheel check skipped: $*" >&2; exit 0; }

"$PY" -c "import build" 2>/dev/null || "$PY" -m pip install -q build 2>&1 | grep -v "is ignored" || true
"$PY" -c "import build" 2>/dev/null || skip "the 'build' package cannot be installed"
"$PY" -m build --outdir "$WORK/dist" . > "$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; echo "error: python -m build failed" >&2; exit 1; }
WHEEL="$(ls "$WORK"/dist/specgauge-*.whl)"
SDIST="$(ls "$WORK"/dist/specgauge-*.tar.gz)"

python3 -m venv "$WORK/venv" 2>/dev/null || skip "python3 -m venv is not available"
"$WORK/venv/bin/python" -m pip install -q "$WHEEL" 2>&1 | grep -v "is ignored" || true
"$WORK/venv/bin/python" -c "import specgauge" 2>/dev/null || skip "the wheel's dependencies could not be installed (offline?)"

cd "$WORK"
"$WORK/venv/bin/python" - "$REPO" "$SDIST" <<'EOF'
import hashlib, pathlib, subprocess, sys, tarfile
import specgauge
repo, sdist = pathlib.Path(sys.argv[1]), sys.argv[2]
pkg = pathlib.Path(specgauge.__file__).parent
assert "site-packages" in str(pkg), f"specgauge imported from {pkg}, not from the installed wheel"
src = repo / "src" / "specgauge"
tracked = subprocess.run(["git", "-C", str(repo), "ls-files", "src/specgauge"], capture_output=True, text=True).stdout.split()
data = [repo / p for p in tracked if not p.endswith(".py")]  # what only package-data ships
assert any("models/tiny-target" in str(p) for p in data), "no shipped model found among the tracked files"
names = set(tarfile.open(sdist).getnames())
for f in data:
    rel = f.relative_to(src)
    got = pkg / rel
    assert got.is_file(), f"{rel}: not installed by the wheel"
    assert hashlib.sha256(got.read_bytes()).digest() == hashlib.sha256(f.read_bytes()).digest(), f"{rel}: differs"
    assert any(n.endswith("src/specgauge/" + str(rel)) for n in names), f"{rel}: not in the sdist"
print(f"wheel check: {len(data)} shipped data files installed intact and in the sdist")
EOF
SG="$WORK/venv/bin/specgauge"
"$SG" profile --limit 24 --json > profile.json
"$SG" simulate -m ngram,suffix -k 1-3 --limit 24 --json > simulate.json
"$SG" report simulate.json profile.json -o report.html > report.log
"$WORK/venv/bin/python" - <<'EOF'
import json, pathlib
sim = json.loads(pathlib.Path("simulate.json").read_text())
assert sim["requests_replayed"] == 24 and sim["exact"] is True, (sim["requests_replayed"], sim["exact"])
prof = json.loads(pathlib.Path("profile.json").read_text())
assert prof["overall"]["requests"] == 24
html = pathlib.Path("report.html").read_text()
assert "<html" in html and "ngram" in html
print("wheel check: profile, simulate (exact replay of the shipped logs) and report ran from the installed wheel")
EOF
