"""One ``specgauge demo --lang ko`` run per test session, shared by ``test_demo.py`` (every artefact
the demo promises) and ``test_report_ko.py`` (the Korean report in a browser): the demo starts the
embedded server ten times, so running it once saves CI minutes."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

NUM_PROMPTS = 8


@lru_cache(maxsize=1)
def demo_ko() -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = Path(tempfile.mkdtemp(prefix="specgauge-demo-")) / "demo"
    r = subprocess.run([sys.executable, "-m", "specgauge", "demo", "--lang", "ko", "--out-dir", str(out),
                        "--num-prompts", str(NUM_PROMPTS), "--k", "1-2", "--calibration-prompts", "4"],
                       capture_output=True, text=True, timeout=1200, check=False)
    return out, r
