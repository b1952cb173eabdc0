"""The lean forward pass matches transformers' on Llama, Qwen2 and Qwen3 checkpoints, and its KV
cache (slots, offsets, rollback) gives the same logits as a full recomputation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine
transformers = pytest.importorskip("transformers")

from specgauge.engine.model import ModelArgs, ModelLoadError, load_model  # noqa: E402
from specgauge.engine.testing import make_tiny_model  # noqa: E402


@pytest.mark.parametrize(("arch", "tie"), [("llama", False), ("qwen2", True), ("qwen3", False)])
def test_forward_matches_transformers(tmp_path: Path, arch: str, tie: bool) -> None:
    d = make_tiny_model(tmp_path / arch, arch=arch, tie=tie, seed=3)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float64).eval()
    ours = load_model(d, dtype=torch.float64)
    ids = torch.randint(0, 320, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(ids).logits
    cache = ours.new_cache(num_slots=3, max_len=32)
    got = ours(ids, torch.tensor([2, 0]), torch.tensor([0, 0]), cache)
    torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-4)


def test_cache_offsets_and_rollback(tmp_path: Path) -> None:
    d = make_tiny_model(tmp_path / "m", seed=5)
    m = load_model(d, dtype=torch.float64)
    seq = torch.randint(0, 320, (1, 12), generator=torch.Generator().manual_seed(2))
    full = m(seq, torch.tensor([0]), torch.tensor([0]), m.new_cache(1, 32))
    cache = m.new_cache(2, 32)
    slot = torch.tensor([1])
    m(seq[:, :5], slot, torch.tensor([0]), cache)
    # write 4 wrong tokens at positions 5..8, then roll back to length 5 and feed the true ones
    m(torch.full((1, 4), 7), slot, torch.tensor([5]), cache)
    got = m(seq[:, 5:], slot, torch.tensor([5]), cache)
    torch.testing.assert_close(got, full[:, 5:], rtol=1e-6, atol=1e-6)


def test_batched_mixed_lengths_match_single_rows(tmp_path: Path) -> None:
    d = make_tiny_model(tmp_path / "m", seed=6)
    m = load_model(d, dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(0, 320, (1, 7), generator=g), torch.randint(0, 320, (1, 3), generator=g)
    ca = m(a, torch.tensor([0]), torch.tensor([0]), m.new_cache(1, 32))
    cb = m(b, torch.tensor([0]), torch.tensor([0]), m.new_cache(1, 32))
    cache = m.new_cache(2, 32)
    batch = torch.zeros(2, 7, dtype=torch.long)
    batch[0], batch[1, :3] = a[0], b[0]
    out = m(batch, torch.tensor([1, 0]), torch.tensor([0, 0]), cache, last_only=torch.tensor([6, 2]))
    torch.testing.assert_close(out[0, 0], ca[0, 6])
    torch.testing.assert_close(out[1, 0], cb[0, 2])


def test_unsupported_model_type_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelLoadError, match="gpt2"):
        ModelArgs.from_dir(tmp_path)
    with pytest.raises(ModelLoadError, match="config.json"):
        ModelArgs.from_dir(tmp_path / "nope")
