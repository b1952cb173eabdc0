"""The SGLang dialect on responses a real SGLang server produced (``tests/data/sglang/README.md``):
a native ``/generate`` ``meta_info`` from an EAGLE run, and an OpenAI chat answer from an EAGLE-2
server, which carries no per-request speculative counts (acceptance then comes from the gauges)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from specgauge.loadgen.dialects import get_dialect

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang"


def test_native_generate_meta_info_from_an_eagle_run() -> None:
    meta = ast.literal_eval((DATA / "mtbench_eagle_meta_info.txt").read_text())
    final = {"text": "…", "meta_info": meta}  # the native /generate answer's shape
    d = get_dialect("sglang")
    spec = d.request_spec(final)
    assert spec is not None and spec.drafts == 101
    # no explicit accepted count in this release's meta_info: accepted = completion - verify steps, labelled as derived
    assert spec.accepted_tokens == 256 - 101 and spec.draft_tokens is None
    assert "completion_tokens-spec_verify_ct" in spec.source
    assert spec.mean_acceptance_length == 256 / 101  # SGLang's own accept length: completion_tokens / spec_verify_ct
    assert d.request_extra(final) == {"meta_info": meta}


def test_openai_chat_answer_of_an_eagle2_server_has_no_per_request_counts() -> None:
    body = json.loads((DATA / "eagle2_chat_completion_docs.json").read_text())
    printed = (DATA / "eagle2_chat_completion_docs_printed.txt").read_text()
    assert f"completion_tokens={body['usage']['completion_tokens']}" in printed and body["id"] in printed
    d = get_dialect("sglang")
    assert d.request_spec(body) is None  # unknown, not zero
    assert d.request_extra(body) == {}
    assert d.cumulative_tokens(body) == 48
