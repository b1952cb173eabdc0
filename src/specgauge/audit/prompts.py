"""The prompts an audit samples: a built-in handful, or the first requests of a workload.

The built-in prompts are short repeated code patterns: an n-gram (or suffix) drafter proposes
tokens right after the first sampled one, so the positions the audit tests are produced by the
server's rejection sampler — the part that must be lossless — while the next-token distribution
still has a spread to compare (a dozen or more distinct continuations at position 1 on the
shipped tiny model at temperature 0.8).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

BUILTIN_PROMPTS: tuple[str, ...] = (
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "if x > 0:\n    return x\nif x > 0:\n",
    "import os\nimport sys\nimport os\nimport",
)


class AuditPrompt(BaseModel):
    """One prompt: completions text, or chat messages (then the chat endpoint is used)."""

    id: str
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None

    @property
    def endpoint(self) -> str:
        return "/v1/chat/completions" if self.messages is not None else "/v1/completions"

    def body(self) -> dict[str, Any]:
        return {"messages": self.messages} if self.messages is not None else {"prompt": self.prompt}


def builtin_prompts(limit: int | None = None) -> list[AuditPrompt]:
    chosen = BUILTIN_PROMPTS if limit is None else BUILTIN_PROMPTS[:limit]
    return [AuditPrompt(id=f"builtin-{i}", prompt=p) for i, p in enumerate(chosen)]


def workload_prompts(paths: Sequence[Path], limit: int) -> list[AuditPrompt]:
    """The first ``limit`` requests of a workload (their own sampling settings are not used: the
    audit sets temperature, length and n itself)."""
    from specgauge.workload.loaders import LoadOptions, iter_workload
    from specgauge.workload.reader import WorkloadError
    from specgauge.workload.schema import ApiKind

    out = []
    for item in iter_workload(paths, LoadOptions(limit=limit)):
        r = item.request
        if r.api is ApiKind.chat:
            out.append(AuditPrompt(id=r.id, messages=[m.model_dump(exclude_none=True) for m in r.messages or []]))
        elif isinstance(r.prompt, str):
            out.append(AuditPrompt(id=r.id, prompt=r.prompt))
        else:
            raise WorkloadError(item.source or r.id, "the audit needs a text prompt or chat messages, not token ids",
                                "prompt")
    return out


def fingerprint(prompts: Sequence[AuditPrompt]) -> str:
    """A short hash of the prompts (an audit resumes only over the same prompts)."""
    data = json.dumps([p.model_dump(mode="json") for p in prompts], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(data.encode()).hexdigest()[:16]
