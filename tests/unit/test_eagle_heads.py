"""EAGLE-3 / MTP heads on tiny random models: the engine-side proposer (fed target hidden states step
by step) drafts what a from-scratch recomputation of vLLM's loop drafts, and the one-pass replay
accepts exactly what was accepted along an output built to accept a known number of drafts per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine

from specgauge.drafters.base import make_drafter, trace_from_runs  # noqa: E402
from specgauge.drafters.heads import chain  # noqa: E402
from specgauge.drafters.heads.config import HeadLoadError  # noqa: E402
from specgauge.drafters.heads.loader import load_head  # noqa: E402
from specgauge.drafters.heads.make import eagle3_config, mtp_config, new_head, save_head  # noqa: E402
from specgauge.targets.lean import LeanTarget  # noqa: E402
from specgauge.testing.engine import make_tiny_model  # noqa: E402

V = 96


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("target"), vocab_size=V, hidden=32, layers=4, seed=5)


@pytest.fixture(scope="module", params=["eagle3", "mtp"])
def head_dir(request: pytest.FixtureRequest, target_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = LeanTarget.open(target_dir)
    if request.param == "eagle3":  # a draft vocabulary of 80 of the 96 ids: d2t is exercised
        ids = torch.tensor(sorted(np.random.default_rng(1).choice(V, 80, replace=False).tolist()))
        head = new_head(eagle3_config(target, draft_vocab_size=80, aux_layer_ids=(1, 2, 4)), target, seed=2,
                        draft_to_target=ids)
    else:
        head = new_head(mtp_config(target), target, seed=2)
    for p in head.parameters():  # larger weights than the init: drafts that depend on their inputs
        if p.requires_grad:
            p.data.mul_(8.0 if p.dim() > 1 else 1.0)
    return save_head(head, tmp_path_factory.mktemp(request.param), target.num_layers, dtype=torch.float32)


def _reference_drafts(drafter, hist: list[int], k: int) -> list[int]:  # type: ignore[no-untyped-def]
    """vLLM's proposer recomputed from scratch for one history: the target's hidden states at every
    position, the head's first pass over all of them, then k-1 chain steps, every key kept in plain
    lists (an independent loop: no cache, no level batching)."""
    h = drafter.head
    T = len(hist) - 1
    with torch.inference_mode():
        hid = drafter.target_hidden(hist)
        pos = torch.arange(T)
        first: list[tuple] = []

        def level0(i, kk, vv):  # type: ignore[no-untyped-def]
            first.append((kk, vv))
            return [(kk, vv, pos[None, :] <= pos[:, None])]

        logits, hh = chain.forward(h, torch.tensor(hist[1:]), pos, h.combine(hid), level0)
        tok, hh = h.to_target(logits[-1:].argmax(-1)), hh[-1:]
        out = [int(tok)]
        mine: list[list[tuple]] = [[] for _ in first]
        for s in range(1, k):
            def step(i, kk, vv):  # type: ignore[no-untyped-def]
                mine[i].append((kk, vv, None))
                return [(first[i][0], first[i][1], torch.ones(1, T, dtype=torch.bool)), *mine[i]]

            logits, hh = chain.forward(h, tok, torch.tensor([T - 1 + s]), hh, step)
            tok = h.to_target(logits.argmax(-1))
            out.append(int(tok))
    return out


@pytest.mark.parametrize("k", [1, 3, 5])
def test_engine_proposer_and_replay_agree_on_a_built_output(head_dir: Path, target_dir: Path, k: int) -> None:
    kind = "eagle3" if "eagle3" in head_dir.name else "mtp"
    d = make_drafter(kind, model=str(head_dir), target=str(target_dir), num_speculative_tokens=k, max_model_len=256)
    rng = np.random.default_rng(k)
    prompt = rng.integers(0, V, 9).tolist()
    out = [int(rng.integers(0, V))]
    # steps as the engine takes them: feed the target's hidden rows of the verified positions, propose,
    # accept a chosen number a of the drafts, then emit a token that differs from draft a+1
    d.begin("r", prompt)

    def rows(seq: list[int], start: int, stop: int):  # type: ignore[no-untyped-def]
        return d.target.run(seq[:stop], d.hidden_layers).flat()[start:stop]

    hist = prompt + out
    d.observe_hidden("r", rows(hist, 0, len(prompt)))
    planned: list[int] = []
    while len(out) < 40:
        drafts = d.propose("r", hist, k)
        assert drafts == _reference_drafts(d, hist, k)
        a = int(rng.integers(0, k + 1))
        extra = int(rng.integers(0, V))
        if a < k and extra == drafts[a]:
            extra = (extra + 1) % V
        new = drafts[:a] + [extra]
        start = len(hist) - 1
        hist, out = hist + new, out + new
        planned.append(a)
        d.observe_hidden("r", rows(hist, start, start + a + 1))
    d.end("r", out)
    assert sum(planned) > 0
    runs, tf = d.replay_arrays(prompt, out, k)
    trace = trace_from_runs(runs, k)
    # the replay reproduces the planned acceptances (the last step may be cut by the output's end)
    assert trace.accepted.tolist()[: len(planned) - 1] == planned[:-1]
    assert tf[1] == (runs[1] > 0)  # draft 1 is teacher-forced: both figures agree there
    assert (d.accept_runs(prompt, out, k) == runs).all()


def test_bad_heads_are_clear_errors(head_dir: Path, target_dir: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "other", vocab_size=V + 4, hidden=32, layers=4, seed=1)
    with pytest.raises(HeadLoadError, match="vocab_size"):
        load_head(head_dir, LeanTarget.open(other))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        make_drafter("eagle3", model=str(tmp_path / "empty"), target=str(target_dir))
    with pytest.raises(ValueError, match="needs its target model"):
        make_drafter("mtp", model=str(head_dir))
    wrong = "mtp" if "eagle3" in head_dir.name else "eagle3"
    with pytest.raises(ValueError, match=f"method '{wrong}' was asked for"):
        make_drafter(wrong, model=str(head_dir), target=str(target_dir))


def test_replay_carries_the_teacher_forced_figure_from_the_same_pass(head_dir: Path, target_dir: Path) -> None:
    """The offline replay's traces of a head carry the optimistic teacher-forced figure beside the exact
    one: equal to counting ``teacher_forced_matches`` as a greedy draft model would, one k at a time."""
    from specgauge.drafters.base import trace_from_matches
    from specgauge.offline.replay import MethodReplay, MethodSpec

    kind = "eagle3" if "eagle3" in head_dir.name else "mtp"
    d = make_drafter(kind, model=str(head_dir), target=str(target_dir))
    rng = np.random.default_rng(7)
    prompt, out = rng.integers(0, V, 6).tolist(), rng.integers(0, V, 30).tolist()
    m = d.teacher_forced_matches(prompt, out)
    runs, tf_runs = d.accept_runs_and_teacher_forced(prompt, out, 4)
    assert (runs == d.accept_runs(prompt, out, 4)).all()
    spec = MethodSpec.parse(f"{kind}:{head_dir}").model_copy(update={"options": {"model": str(head_dir), "target": str(target_dir)}})
    traces = MethodReplay(spec, [1, 2, 4]).traces("r", "t", prompt, out)
    for k in (1, 2, 4):
        a, b = traces[k].teacher_forced, trace_from_matches(m, k)
        assert a is not None and a.accepted.tolist() == b.accepted.tolist() and a.drafted.tolist() == b.drafted.tolist()
        assert trace_from_runs(tf_runs, k).accepted.tolist() == b.accepted.tolist()
        assert traces[k].accepted.tolist() == trace_from_runs(runs, k).accepted.tolist()  # the exact figure unchanged
    assert traces[1].teacher_forced.accepted.tolist() == traces[1].accepted.tolist()  # draft 1 reads the target's state


def test_the_target_is_found_or_the_error_names_where_to_give_it(head_dir: Path, target_dir: Path, tmp_path: Path) -> None:
    """A user's head: the target given, or named by its config (relative to the head's parent), or the
    fallback (simulate: the --tokenizer model directory); else one error that says how to give it; a
    target that does not fit names the target and where it came from."""
    import json
    import re
    import shutil

    from specgauge.drafters._hidden import resolve_target

    kind = "eagle3" if "eagle3" in head_dir.name else "mtp"
    mine = tmp_path / "heads" / "mine"
    shutil.copytree(head_dir, mine)
    assert resolve_target(mine, target_dir)[0] == target_dir
    with pytest.raises(ValueError, match="names no target .*--target-model DIR"):
        resolve_target(mine, None)
    assert resolve_target(mine, None, default_target=target_dir) == (target_dir, "the --tokenizer directory (a model directory)")
    cfg = json.loads((mine / "config.json").read_text())
    (mine / "config.json").write_text(json.dumps({**cfg, "target_model": "meta-llama/Llama-3.1-8B-Instruct"}))
    with pytest.raises(ValueError, match="'meta-llama/Llama-3.1-8B-Instruct', which is no directory here nor in the local"):
        resolve_target(mine, None)
    shutil.copytree(target_dir, tmp_path / "heads" / "my-target")
    (mine / "config.json").write_text(json.dumps({**cfg, "speculators_config": {"verifier": {"name_or_path": "my-target"}}}))
    assert resolve_target(mine, None, default_target=tmp_path)[0] == (tmp_path / "heads" / "my-target").resolve()
    (mine / "config.json").write_text("{not json")  # the one config reader says where and why
    with pytest.raises(ValueError, match=re.escape(str(mine / "config.json")) + ": not JSON"):
        resolve_target(mine, None)
    (mine / "config.json").write_text(json.dumps({**cfg, "speculators_config": {"verifier": {"name_or_path": "my-target"}}}))
    assert make_drafter(kind, model=str(mine)).target.vocab_size == V  # the verifier named by the config
    other = make_tiny_model(tmp_path / "other", vocab_size=V + 4, hidden=32, layers=4, seed=1)
    with pytest.raises(ValueError, match=f"vocab_size {V} but the target has {V + 4} \\(target {re.escape(str(other))}: given"):
        make_drafter(kind, model=str(mine), target=str(other))
    with pytest.raises(ValueError, match=f"no such directory \\(target {re.escape(str(tmp_path / 'nowhere'))}: given"):
        make_drafter(kind, model=str(mine), target=str(tmp_path / "nowhere"))


def test_the_replays_pruned_drafts_are_the_full_levels_where_a_chain_is_alive(head_dir: Path, target_dir: Path) -> None:
    """``chain.draft_ids`` skips the lm_head of chains that already drafted a wrong token; where it
    computes, it equals ``levels`` + argmax, and it computes every row a count can read."""
    kind = "eagle3" if "eagle3" in head_dir.name else "mtp"
    d = make_drafter(kind, model=str(head_dir), target=str(target_dir))
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, V, 7).tolist()
    out = [int(t) for t in rng.integers(0, V, 25)]
    seq = prompt + out
    with torch.inference_mode():
        hid = d.target_hidden(seq)
        nxt = torch.tensor(seq[1:])
        a, n_lv = len(prompt) - 1, 4
        pred = chain.draft_ids(d.head, nxt, hid, n_lv, start=a)
        full = [d.head.to_target(x.argmax(-1)) for x in chain.levels(d.head, nxt, hid, n_lv, start=a)]
    T = len(seq) - 1
    label = seq[2:] + [-2]  # row p's true next draft: t[p+2]
    for s in range(n_lv):
        for p in range(a + s, T):
            c = p - s
            alive = all(int(full[j][c + j if j == 0 else c + j - a]) == label[c + j] for j in range(s))
            got = int(pred[s, p])
            want = int(full[s][p if s == 0 else p - a])
            assert got == (want if alive else -1), (s, p)
