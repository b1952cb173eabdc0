"""Small workloads cut from the shipped logged sample, shared by the prediction tests: the first ``n``
logged requests that ``keep`` accepts and that have at least ``min_output`` output tokens, with
``max_tokens`` lowered and each logged output cut to match (so replay stays exact)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgauge.workload.samples import sample_logged_path


def cut_logged_sample(out: Path, n: int, max_tokens: int, min_output: int = 8,
                      keep: Callable[[dict[str, Any]], bool] = lambda request: True,
                      drop_arrival_time: bool = False) -> Path:
    rows = []
    with open(sample_logged_path(), encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            r = d["request"]
            if len(d["response"]["output_token_ids"]) < min_output or not keep(r):
                continue
            r["max_tokens"] = max_tokens
            if drop_arrival_time:
                r.pop("arrival_time", None)
            d["response"]["output_token_ids"] = d["response"]["output_token_ids"][:max_tokens]
            d["response"]["text"] = ""
            rows.append(json.dumps(d))
            if len(rows) == n:
                break
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out
