"""Hypothesis: any workload line, valid or broken, gives a parsed request or a WorkloadError naming
FILE:LINE — never another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgauge.workload.loaders import LoadOptions, LoadReport, iter_workload
from specgauge.workload.reader import WorkloadError

json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=12)

roles = st.sampled_from(["system", "user", "assistant", "tool", "robot", "", None])
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": st.text(max_size=30) | json_values}), max_size=3)
FIELDS = {
    "messages": messages | json_values,
    "prompt": st.text(max_size=30) | st.lists(st.integers(-5, 100), max_size=5) | json_values,
    "max_tokens": st.integers(-5, 5000) | json_values,
    "temperature": st.floats(-1, 6, allow_nan=False) | json_values,
    "top_p": st.floats(-0.5, 1.5, allow_nan=False) | json_values,
    "top_k": st.integers(-3, 50) | json_values,
    "seed": st.integers(-10, 10) | json_values,
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=2) | json_values,
    "segment": st.text(max_size=8) | json_values,
    "metadata": st.dictionaries(st.text(max_size=5), json_scalars, max_size=2) | json_values,
    "tools": st.lists(st.dictionaries(st.text(max_size=5), json_scalars, max_size=2), max_size=2) | json_values,
    "arrival_time": st.floats(-5, 1e6, allow_nan=False) | json_values,
    "custom_id": st.text(max_size=5),
    "conversations": st.lists(st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "x"]), "value": st.text(max_size=10) | json_values}), max_size=3),
    "output_tokens": st.integers(-3, 100) | json_values,
    "request": json_values,
    "response": json_values,
}
bodies = st.fixed_dictionaries({}, optional=FIELDS)


def _line(v: Any) -> st.SearchStrategy[bytes]:
    return st.just((json.dumps(v, ensure_ascii=False) + "\n").encode("utf-8"))


lines = st.one_of(
    bodies.flatmap(_line),
    json_values.flatmap(_line),
    st.binary(max_size=40).map(lambda b: b + b"\n"),
    st.text(max_size=40).map(lambda t: (t.replace("\n", " ") + "\n").encode("utf-8")),
    bodies.flatmap(_line).map(lambda b: b[: max(1, len(b) // 2)] + b"\n"),  # cut in half
)


@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(lines, min_size=1, max_size=4), st.booleans())
def test_any_line_parses_or_is_named(rows: list[bytes], skip: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.jsonl"
        p.write_bytes(b"".join(rows))
        rep = LoadReport()
        try:
            items = list(iter_workload([p], LoadOptions(skip_invalid=skip), rep))
        except WorkloadError as e:
            assert str(e).startswith(str(p)), str(e)
            assert "Traceback" not in str(e)
            return
        for it in items:
            assert it.source.startswith(f"{p}:")
            assert it.request.id
            it.request.body(model="m", stream=True)  # every parsed request can be sent
        assert rep.items == len(items)
