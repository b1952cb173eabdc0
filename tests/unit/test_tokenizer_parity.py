"""The tokenizer adapter renders chat requests exactly as transformers (the embedded server, vLLM)
does: same prompt token ids for every built-in sample request, tools included."""

from __future__ import annotations

import pytest

from specgauge.models import available, target_dir
from specgauge.workload.loaders import load_workload
from specgauge.workload.samples import sample_path
from specgauge.workload.tokenizer import HFTokenizer

transformers = pytest.importorskip("transformers")


@pytest.mark.skipif(not available(), reason="shipped tiny models missing")
def test_prompt_ids_equal_transformers_apply_chat_template() -> None:
    ours = HFTokenizer(target_dir())
    ref = transformers.AutoTokenizer.from_pretrained(str(target_dir()))
    items = load_workload([sample_path()])
    assert len(items) == 240
    for it in items:
        r = it.request
        msgs = [m.model_dump(exclude_none=True) for m in r.messages or []]
        want = ref.apply_chat_template(msgs, tools=r.tools, add_generation_prompt=True, tokenize=True)
        if isinstance(want, dict) or hasattr(want, "input_ids"):
            want = want["input_ids"]
        assert ours.encode_request(r) == list(want), r.id
