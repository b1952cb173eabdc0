"""Greedy speculative decoding equals target-only greedy decoding token for token (every drafter,
k = 1..8, batch 1 and batched with mixed lengths), and the engine's bookkeeping is right."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine

from specgauge.config import SpeculativeConfig  # noqa: E402
from specgauge.drafters.base import drafter_kinds  # noqa: E402
from specgauge.engine.core import Engine, RequestError, generate  # noqa: E402
from specgauge.engine.sampling import SamplingParams  # noqa: E402
from specgauge.testing.engine import make_tiny_model  # noqa: E402

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


class LookupDrafter:
    """A tiny prompt-lookup drafter (stand-in when the real ``ngram`` drafter is not there)."""

    kind = "test_lookup"
    deterministic = True

    def begin(self, request_id: str, prompt_ids: Sequence[int]) -> None: ...

    def end(self, request_id: str, output_ids: Sequence[int]) -> None: ...

    def propose(self, request_id: str, history: Sequence[int], k: int) -> list[int]:
        h = list(history)
        for n in (3, 2, 1):
            if len(h) <= n:
                continue
            tail = h[-n:]
            for s in range(len(h) - n - 1, -1, -1):
                if h[s : s + n] == tail:
                    return h[s + n : s + n + k]
        return []


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    target = make_tiny_model(root / "target", layers=2, seed=1)
    draft = make_tiny_model(root / "draft", layers=2, seed=1, perturb_from=target, perturb_scale=0.5)
    return target, draft


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 3 + (i * 11) % 37
        base = torch.randint(1, 320, (max(2, length // 3),), generator=g).tolist()
        out.append((base * 3)[:length])  # some repetition, so prompt lookup has something to find
    return out


@pytest.fixture(scope="module")
def reference(models: tuple[Path, Path]) -> dict[int, list[list[int]]]:
    target, _ = models
    eng = Engine(target, None, max_batch=6, max_model_len=256, dtype="float64")
    return {1: generate(eng, prompts(1), GREEDY), 6: generate(eng, prompts(6), GREEDY)}


def make_engine(kind: str, k: int, models: tuple[Path, Path], max_batch: int) -> Engine:
    target, draft = models
    if kind == "draft_model":
        spec = SpeculativeConfig(model=str(draft), num_speculative_tokens=k)
        return Engine(target, spec, max_batch=max_batch, max_model_len=256, dtype="float64")
    if kind == "test_lookup":
        spec = SpeculativeConfig(method="ngram", num_speculative_tokens=k)
        return Engine(target, spec, max_batch=max_batch, max_model_len=256, dtype="float64", drafter=LookupDrafter())
    spec = SpeculativeConfig(method=kind, num_speculative_tokens=k, prompt_lookup_max=3, prompt_lookup_min=1) if kind == "ngram" else SpeculativeConfig(method=kind, num_speculative_tokens=k)
    return Engine(target, spec, max_batch=max_batch, max_model_len=256, dtype="float64")


KINDS = ["draft_model", "test_lookup"] + [k for k in ("ngram", "suffix") if k in drafter_kinds()]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_speculative_equals_target_greedy(
    kind: str, k: int, models: tuple[Path, Path], reference: dict[int, list[list[int]]]
) -> None:
    for batch in (1, 6):
        eng = make_engine(kind, k, models, max_batch=batch)
        got = generate(eng, prompts(batch), GREEDY)
        assert got == reference[batch], f"{kind} k={k} batch={batch}"


def test_drafts_are_really_accepted(models: tuple[Path, Path]) -> None:
    """The equality tests would pass trivially if nothing were ever accepted; make sure they don't."""
    eng = make_engine("draft_model", 4, models, max_batch=4)
    ids = [f"r{i}" for i in range(4)]
    for rid, p in zip(ids, prompts(4), strict=True):
        eng.add_request(rid, p, GREEDY)
    drafted = accepted = 0
    final = {}
    while eng.has_unfinished():
        for o in eng.step():
            drafted += o.num_drafted
            accepted += o.num_accepted
            assert len(o.new_token_ids) <= o.num_accepted + 1
            if o.finished:
                final[o.request_id] = o
    assert 0 < accepted < drafted
    spec = [final[r].spec for r in ids]
    assert sum(s.num_draft_tokens for s in spec) == drafted  # type: ignore[union-attr]
    assert sum(s.num_accepted_tokens for s in spec) == accepted  # type: ignore[union-attr]
    for s in spec:
        assert s is not None and sum(s.acceptance_histogram) == s.num_drafts
        assert sum(s.accepted_per_pos) == s.num_accepted_tokens
        assert s.accepted_per_pos == sorted(s.accepted_per_pos, reverse=True)


def test_max_tokens_and_stop_tokens(models: tuple[Path, Path], reference: dict[int, list[list[int]]]) -> None:
    eng = make_engine("test_lookup", 8, models, max_batch=2)
    ref = reference[1][0]
    for n in (1, 2, 7, 13):
        out = generate(eng, prompts(1), GREEDY.model_copy(update={"max_tokens": n}))
        assert out == [ref[:n]]
    stop = ref[9]
    first = ref.index(stop)
    out = generate(eng, prompts(1), GREEDY.model_copy(update={"stop_token_ids": (stop,)}))
    assert out == [ref[: first + 1]]


def test_eos_finishes_with_stop(models: tuple[Path, Path], reference: dict[int, list[list[int]]]) -> None:
    eng = make_engine("draft_model", 3, models, max_batch=2)
    ref = reference[1][0]
    eng.eos = {ref[5]}
    eng.add_request("a", prompts(1)[0], GREEDY.model_copy(update={"ignore_eos": False}))
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    assert sum((o.new_token_ids for o in outs), []) == ref[: ref.index(ref[5]) + 1]
    assert outs[-1].finished and outs[-1].finish_reason == "stop"


def test_seeded_sampling_is_reproducible_and_batch_independent(models: tuple[Path, Path]) -> None:
    params = SamplingParams(max_tokens=25, temperature=1.0, top_p=0.9, seed=123, ignore_eos=True)
    eng = make_engine("draft_model", 3, models, max_batch=4)
    alone = generate(eng, prompts(1), params)[0]
    in_batch = generate(eng, prompts(4), params)[0]
    assert alone == in_batch
    other = generate(eng, prompts(1), params.model_copy(update={"seed": 124}))[0]
    assert other != alone


def test_continuous_batching_admits_waiting_requests_and_abort_frees_slots(models: tuple[Path, Path]) -> None:
    eng = make_engine("test_lookup", 2, models, max_batch=2)
    for i, p in enumerate(prompts(3)):
        eng.add_request(f"r{i}", p, GREEDY)
    eng.step()
    assert eng.num_running == 2 and eng.num_waiting == 1
    eng.abort("r0")
    outs = eng.step()
    assert any(o.request_id == "r0" and o.finish_reason == "abort" for o in outs)
    assert {o.request_id for o in outs} >= {"r2"}  # r2 took r0's slot in the same step
    assert eng.num_running == 2 and eng.num_waiting == 0


def test_bad_requests_are_refused(models: tuple[Path, Path]) -> None:
    eng = make_engine("test_lookup", 2, models, max_batch=1)
    with pytest.raises(RequestError, match="maximum context length"):
        eng.add_request("a", [1] * 250, GREEDY)
    with pytest.raises(RequestError, match="empty"):
        eng.add_request("b", [], GREEDY)
    with pytest.raises(RequestError, match="token ids"):
        eng.add_request("c", [1, 99999], GREEDY)
    eng.add_request("d", [1, 2], GREEDY)
    with pytest.raises(RequestError, match="in use"):
        eng.add_request("d", [1, 2], GREEDY)


@pytest.mark.parametrize("layout", ["flat", "padded"])
def test_flat_verification_feeds_only_what_was_drafted(
    layout: str, models: tuple[Path, Path], reference: dict[int, list[list[int]]]
) -> None:
    """Flat: one verification forward of sum(1 + k_b) tokens (vLLM's layout); padded: B (K + 1).
    Both give the target's greedy output."""
    target, _ = models
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=4)
    eng = Engine(target, spec, max_batch=6, max_model_len=256, dtype="float64", drafter=LookupDrafter(),
                 verify_layout=layout)  # type: ignore[arg-type]
    ids = [f"r{i}" for i in range(6)]
    for rid, p in zip(ids, prompts(6), strict=True):
        eng.add_request(rid, p, GREEDY)
    out: dict[str, list[int]] = {rid: [] for rid in ids}
    mixed = 0
    while eng.has_unfinished():
        outs = eng.step()
        tm = eng.last_timing
        decode = outs[: tm.num_decode]  # decode outputs come first (no aborts here)
        if decode:
            drafted = [o.num_drafted for o in decode]
            want = sum(1 + k for k in drafted) if layout == "flat" else len(decode) * (1 + max(drafted))
            assert tm.verify_tokens == want
            mixed += len(set(drafted)) > 1
        for o in outs:
            out[o.request_id] += o.new_token_ids
    assert mixed > 0  # steps whose proposals differed in length: where flat and padded differ
    assert [out[r] for r in ids] == reference[6]


def test_bad_verify_layout_is_refused(models: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError, match="verify_layout"):
        Engine(models[0], None, max_batch=1, max_model_len=64, verify_layout="ragged")  # type: ignore[arg-type]


def test_greedy_and_sampled_requests_in_one_batch(models: tuple[Path, Path], reference: dict[int, list[list[int]]]) -> None:
    """Greedy rows take the argmax path, sampled rows rejection sampling, in the same verification:
    the greedy ones still equal target-only greedy, the seeded sampled ones what they give alone."""
    sampled = SamplingParams(max_tokens=40, temperature=0.9, top_k=20, seed=7, ignore_eos=True)
    ps = prompts(6)
    for kind in ("draft_model", "test_lookup"):
        alone = generate(make_engine(kind, 3, models, max_batch=1), [ps[1]], sampled)[0]
        eng = make_engine(kind, 3, models, max_batch=6)
        ids = [f"m{i}" for i in range(6)]
        for i, (rid, p) in enumerate(zip(ids, ps, strict=True)):
            eng.add_request(rid, p, sampled if i == 1 else GREEDY)
        out: dict[str, list[int]] = {rid: [] for rid in ids}
        while eng.has_unfinished():
            for o in eng.step():
                out[o.request_id] += o.new_token_ids
        assert out["m1"] == alone, kind
        assert [out[r] for i, r in enumerate(ids) if i != 1] == [x for i, x in enumerate(reference[6]) if i != 1], kind
