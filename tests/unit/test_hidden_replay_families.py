"""The hidden-state replay on real architectures, held to a loop that cannot be wrong the same way: on
tiny random transformers models of every family the issue names (Llama, Qwen3, Qwen3-MoE, Gemma 4,
DeepSeek-V3, gpt-oss), an EAGLE-3 head briefly trained on the target's own greedy text generates with
the plain online loop (``testing/reference_loop.py``: the target re-run over the whole history at every
step, the head drafting from scratch), the outputs are logged, and ``simulate LOG --method eagle3:HEAD
--target-model DIR --device cpu`` must give the same per-request figures, and the replay the same
per-step drafted / accepted counts (greedy). The final step is held to item 4's rule: equal unless
every draft matched up to the logged end (then the row carries guaranteed bounds, which must hold the
loop's count: issue 38 item 4, implemented for every stateless drafter by ``drafters.base.final_step_bounds``).
``simulate`` runs one request per target forward on the CPU by default; with ``--replay-batch-tokens
8192`` (a GPU's default: the requests' passes right-padded in one forward) its rows must be the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from specgauge.cli import app  # noqa: E402
from specgauge.drafters.heads.loader import load_head  # noqa: E402
from specgauge.offline.replay import MethodReplay, MethodSpec  # noqa: E402
from specgauge.targets.hf import TransformersTarget  # noqa: E402
from specgauge.testing.reference_loop import generate, trained_eagle3_head, write_log  # noqa: E402
from tests._target_batches import forward_rows  # noqa: E402
from tests.unit._tiny_targets import FAMILIES, tiny_family  # noqa: E402

K, MAX_TOKENS = 3, 16


def _open_end(steps: list[tuple[int, int]], n_out: int) -> bool:
    """Did the final step keep every draft up to the logged end (so a live server may have kept more)?"""
    emitted = 1 + sum(a + 1 for _, a in steps[:-1])  # tokens before the final step (the prefill's included)
    return emitted + steps[-1][1] >= n_out


def _simulate(args: list[str], rows: Path) -> dict[str, dict[str, object]]:
    res = CliRunner().invoke(app, [*args, "--per-request", str(rows)])
    assert res.exit_code == 0, res.stderr
    return {r["request_id"]: r for r in map(json.loads, rows.read_text().splitlines())}


@pytest.mark.parametrize("name", FAMILIES)
def test_simulate_on_a_real_architecture_equals_the_reference_loop(name: str, tmp_path: Path) -> None:
    tdir = tiny_family(name, tmp_path / name)
    target = TransformersTarget.open(tdir, "cpu", "float32")
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(4, target.vocab_size, (n,), generator=g).tolist() for n in (5, 9)]
    hdir = trained_eagle3_head(target, prompts, tmp_path / "head", MAX_TOKENS + K)
    head = load_head(hdir, target)  # the loop drafts with exactly what simulate will load
    live = [generate(target, head, p, MAX_TOKENS, K) for p in prompts]
    assert sum(a for r in live for _, a in r.steps) > 0, f"{name}: the trained head never drafted an accepted token"
    log = write_log(tmp_path / "log.jsonl", [(p, r.output_ids) for p, r in zip(prompts, live, strict=True)], MAX_TOKENS)

    args = ["simulate", str(log), "--method", f"eagle3:{hdir}", "--target-model", str(tdir), "--device", "cpu",
            "-k", str(K), "--json"]
    with forward_rows() as single:  # one request per target forward (the default on the CPU)
        got = _simulate(args, tmp_path / "rows.jsonl")
    assert single == [1] * len(prompts), single
    with forward_rows() as batched:  # both requests' target passes in one forward (a GPU's default): the same rows
        assert _simulate([*args, "--replay-batch-tokens", "8192"], tmp_path / "rows_batched.jsonl") == got
    assert batched == [len(prompts)], batched

    spec = MethodSpec.parse(f"eagle3:{hdir}").model_copy(update={"options": {"model": str(hdir), "target": str(tdir)}})
    replay = MethodReplay(spec, [K])
    for i, (p, r) in enumerate(zip(prompts, live, strict=True)):
        tr = replay.traces(f"r{i}", "log", p, r.output_ids)[K]
        steps = list(zip(tr.drafted.tolist(), tr.accepted.tolist(), strict=True))
        assert len(steps) == len(r.steps) and steps[:-1] == r.steps[:-1], (name, i, steps, r.steps)
        if _open_end(r.steps, len(r.output_ids)):  # the log ends inside the final step's accepted run
            assert steps[-1][1] <= r.steps[-1][1]
        else:
            assert steps[-1] == r.steps[-1], (name, i)
        row = got[f"r{i}"]
        assert (row["steps"], row["draft_tokens"], row["accepted_tokens"]) == (
            len(steps), sum(d for d, _ in steps), sum(a for _, a in steps))
        live_accepted = sum(a for _, a in r.steps)
        if steps[-1][1] < K and _open_end(steps, len(r.output_ids)):  # item 4: bounds that hold the live count
            lo, hi = row["bounds"]["accepted_tokens"]
            assert not row["exact"] and row["bounds_kind"] == "guaranteed"
            assert lo == row["accepted_tokens"] and lo <= live_accepted <= hi == lo + K - steps[-1][1]
        else:
            assert row["exact"] and row["bounds"] is None and row["accepted_tokens"] == live_accepted
