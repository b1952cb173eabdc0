"""The layer-id convention (``targets/layers.py``) on every family the replay supports, on tiny random
transformers models: vLLM's aux id i is the residual stream entering layer i (= transformers'
``hidden_states[i]`` for 0 <= i < N), id N is the last layer's output before the final norm, and
transformers' last entry is after the final norm (our ``"final"``). ``TransformersTarget`` gives exactly
those tensors, one request at a time, batched or not; ``LeanTarget`` gives what the engine's model gives."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine
pytest.importorskip("transformers")

from specgauge.targets.base import TargetError, budget_batches  # noqa: E402
from specgauge.targets.hf import TransformersTarget  # noqa: E402
from specgauge.targets.layers import (  # noqa: E402
    capture_point,
    default_eagle3_aux_ids,
    dflash_aux_ids,
    hf_hidden_states_index,
    vllm_aux_order,
)
from tests.unit._tiny_targets import FAMILIES, tiny_family  # noqa: E402


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, tiny_family(request.param, tmp_path_factory.mktemp(request.param))


def test_layer_numbering_worked_example() -> None:
    assert [hf_hidden_states_index(i, 4) for i in (0, 1, 3, 4, "final")] == [0, 1, 3, None, 4]
    assert [capture_point(i) for i in (0, 2, 4, "final")] == [("embed", 0), ("layer_output", 1), ("layer_output", 3),
                                                              ("final_norm", 0)]
    assert dflash_aux_ids([2, 0]) == (1, 3)
    assert default_eagle3_aux_ids(32) == (2, 16, 29) and default_eagle3_aux_ids(4) == (1, 2)
    assert vllm_aux_order([29, 2, 16, 2]) == (2, 16, 29)  # vLLM sorts and dedups, whatever a config lists


def test_every_layer_id_is_the_tensor_the_convention_names(family: tuple[str, Path]) -> None:
    name, path = family
    t = TransformersTarget.open(path, "cpu", "float32")
    N = t.num_layers
    rng = torch.Generator().manual_seed(1)
    seq = torch.randint(0, t.vocab_size, (11,), generator=rng).tolist()
    ids = [*range(N + 1), "final"]
    got = t.run(seq, ids).hidden  # [T, N + 2, H]
    assert got.shape == (11, N + 2, t.hidden_size)
    # independently: transformers' own hidden_states, and a hook on the last layer for id N
    last: dict[str, torch.Tensor] = {}
    h = t.decoder.layers[N - 1].register_forward_hook(lambda m, a, o: last.__setitem__("x", o[0] if isinstance(o, tuple) else o))
    with torch.inference_mode():
        hs = t.model(torch.tensor([seq]), output_hidden_states=True).hidden_states
    h.remove()
    assert len(hs) == N + 1
    for i in range(N):  # vLLM id i = transformers index i for 0 <= i < N
        assert torch.equal(got[:, i], hs[i][0]), (name, i)
    assert torch.equal(got[:, N], last["x"][0])  # id N: before the final norm ...
    assert torch.allclose(got[:, N + 1], hs[N][0]) and torch.allclose(t.final_norm(got[:, N]), hs[N][0])  # ... "final": after
    assert not torch.allclose(got[:, N], hs[N][0])  # the two differ: a norm sits between them


def test_batched_passes_equal_single_passes_in_order(family: tuple[str, Path]) -> None:
    _, path = family
    t = TransformersTarget.open(path, "cpu", "float32")
    rng = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, t.vocab_size, (n,), generator=rng).tolist() for n in (5, 13, 1, 9)]
    ids = [1, t.num_layers]
    batched = list(t.passes(seqs, ids, token_budget=30))
    assert [p.token_ids for p in batched] == [tuple(s) for s in seqs]
    for p, s in zip(batched, seqs, strict=True):
        alone = t.run(s, ids).hidden
        assert p.hidden.shape == alone.shape
        torch.testing.assert_close(p.hidden, alone, rtol=1e-4, atol=1e-4)  # float noise: other matmul shapes


def test_kv_of_a_layer_is_the_cache_transformers_keeps(tmp_path: Path) -> None:
    t = TransformersTarget.open(tiny_family("qwen3", tmp_path / "q"), "cpu", "float32")
    p = t.run([3, 4, 5, 6], [1], kv_layers=[0])
    k, v = p.kv[0]
    c = t.config
    assert k.shape == (4, c.num_key_value_heads, c.head_dim) and v.shape == k.shape
    with pytest.raises(TargetError, match="KV of layer 9"):
        t.run([1, 2], [1], kv_layers=[9])


def test_bad_input_names_the_place(tmp_path: Path) -> None:
    path = tiny_family("llama", tmp_path / "l")
    t = TransformersTarget.open(path, "cpu", "float32")
    with pytest.raises(TargetError, match=r"layer id 9 is not in 0\.\.2"):
        t.run([1, 2], [9])
    with pytest.raises(TargetError, match="outside the target's vocabulary"):
        t.run([1, 10**6], [1])
    with pytest.raises(TargetError, match="not in the local Hugging Face cache .nothing is downloaded"):
        TransformersTarget.open("nobody-here/no-such-model-xyz")
    with pytest.raises(TargetError, match="no such directory"):
        TransformersTarget.open(tmp_path / "missing" / "dir")
    with pytest.raises(TargetError, match="--dtype 'float8'"):
        TransformersTarget.open(path, "cpu", "float8")


def test_budget_batches_keep_order_and_bound_the_padded_size() -> None:
    seqs = [[1] * n for n in (3, 3, 8, 2, 20, 1)]
    groups = list(budget_batches(seqs, 16))
    assert [len(s) for g in groups for s in g] == [3, 3, 8, 2, 20, 1]
    for g in groups:
        assert len(g) == 1 or len(g) * max(map(len, g)) <= 16


def test_lean_target_gives_the_engine_models_hidden_states(tmp_path: Path) -> None:
    from specgauge.targets.lean import LeanTarget
    from specgauge.testing.engine import make_tiny_model

    path = make_tiny_model(tmp_path / "m", vocab_size=64, hidden=32, layers=3, seed=3)
    lean = LeanTarget.open(path)
    hf = TransformersTarget.open(path, "cpu", "float32")
    seq = list(range(1, 12))
    ids = [0, 2, 3, "final"]
    torch.testing.assert_close(lean.run(seq, ids).hidden, hf.run(seq, ids).hidden, rtol=1e-4, atol=1e-4)
    seqs = [seq, seq[:4], seq[2:9]]
    for p, s in zip(lean.passes(seqs, ids, token_budget=16), seqs, strict=True):
        torch.testing.assert_close(p.hidden, lean.run(s, ids).hidden, rtol=1e-5, atol=1e-5)
