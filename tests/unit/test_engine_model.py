"""The lean forward pass matches transformers' on Llama, Qwen2 and Qwen3 checkpoints, and its KV
cache (slots, offsets, rollback) gives the same logits as a full recomputation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine
transformers = pytest.importorskip("transformers")

from specgauge.testing.engine import make_tiny_model  # noqa: E402
from specgauge.nn.transformer import ModelArgs, ModelLoadError  # noqa: E402
from specgauge.nn.weights import load_model  # noqa: E402


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


@pytest.mark.parametrize("kv_heads", [2, 4])
def test_flat_varlen_forward_equals_each_sequence_alone(tmp_path: Path, kv_heads: int) -> None:
    """One flat forward over sequences with different new-token counts, cached lengths and
    non-contiguous, unordered slots gives each sequence the logits it gets alone (no padding)."""
    d = make_tiny_model(tmp_path / "m", seed=7, kv_heads=kv_heads)
    m = load_model(d, dtype=torch.float64)
    g = torch.Generator().manual_seed(4)
    # (slot, cached prefix length, new tokens): two share a length (one attention call), slots 5 and 1 out of order
    seqs = [(5, 6, 3), (1, 0, 4), (3, 9, 1), (0, 2, 3), (2, 11, 5)]
    full = {s: torch.randint(0, 320, (1, c + n), generator=g) for s, c, n in seqs}
    cache = m.new_cache(6, 32)
    for slot, c, _ in seqs:  # fill each slot's cached prefix
        if c:
            m(full[slot][:, :c], torch.tensor([slot]), torch.tensor([0]), cache)
    flat = torch.cat([full[s][0, c:] for s, c, _ in seqs])
    got = m.forward_flat(flat, [s for s, _, _ in seqs], [c for _, c, _ in seqs], [n for _, _, n in seqs], cache)
    assert got.shape == (flat.numel(), 320)
    o = 0
    for slot, c, n in seqs:
        alone = m(full[slot], torch.tensor([0]), torch.tensor([0]), m.new_cache(1, 32))[0, c:]
        torch.testing.assert_close(got[o : o + n], alone, rtol=1e-9, atol=1e-9)
        o += n
    # logits_at picks rows of the same forward
    at = torch.tensor([2, 6, 12])
    cache2 = m.new_cache(6, 32)
    for slot, c, _ in seqs:
        if c:
            m(full[slot][:, :c], torch.tensor([slot]), torch.tensor([0]), cache2)
    picked = m.forward_flat(flat, [s for s, _, _ in seqs], [c for _, c, _ in seqs], [n for _, _, n in seqs], cache2,
                            logits_at=at)
    torch.testing.assert_close(picked, got[at], rtol=1e-9, atol=1e-9)


def test_plan_refuses_a_sequence_longer_than_the_cache(tmp_path: Path) -> None:
    m = load_model(make_tiny_model(tmp_path / "m", seed=8), dtype=torch.float64)
    cache = m.new_cache(2, 16)
    with pytest.raises(ValueError, match="longer than the KV cache"):
        m.plan([0, 1], [10, 0], [7, 1], cache)


def test_advanced_plan_equals_a_fresh_plan(tmp_path: Path) -> None:
    """Drafting moves a one-token-per-sequence plan on by tensor ops; it must equal planning anew."""
    m = load_model(make_tiny_model(tmp_path / "m", seed=9), dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    for slots, starts in (([4], [7]), ([3, 0, 5], [2, 9, 5])):
        prefix = torch.randint(0, 320, (6, 16), generator=g)
        caches = [m.new_cache(6, 24), m.new_cache(6, 24)]
        for cache in caches:
            for s, c in zip(slots, starts, strict=True):
                m(prefix[s : s + 1, :c], torch.tensor([s]), torch.tensor([0]), cache)
        ones = [1] * len(slots)
        plan = m.plan(slots, starts, ones, caches[0])
        for step in range(3):
            tok = torch.randint(0, 320, (len(slots),), generator=g)
            if step:
                plan = m.advance(plan, caches[0])
            moved = m.forward_flat(tok, slots, [], ones, caches[0], plan=plan)
            fresh = m.forward_flat(tok, slots, [c + step for c in starts], ones, caches[1])
            torch.testing.assert_close(moved, fresh, rtol=0, atol=0)
    with pytest.raises(ValueError, match="one new token"):
        m.advance(m.plan([0], [0], [3], m.new_cache(1, 8)), m.new_cache(1, 8))


def test_bf16_normalises_and_rotates_like_transformers(tmp_path: Path) -> None:
    """The one RMSNorm (``nn.transformer.rms_norm``: the engine's layers and the lean target's final norm)
    normalises half precision in float32 and casts back, bit for bit as transformers' ``LlamaRMSNorm``;
    RoPE's frequencies stay float32 in a bf16 model (a bf16 ``inv_freq`` turned cos/sin ~1e-2 off)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from specgauge.nn.transformer import RMSNorm
    from specgauge.targets.lean import LeanTarget

    g = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(4, 7, 64, generator=g)).to(torch.bfloat16)
    ref = LlamaRMSNorm(64, eps=1e-5)
    ours = RMSNorm(64, 1e-5)
    with torch.no_grad():
        ref.weight.copy_(1 + torch.randn(64, generator=g))
        ours.weight.copy_(ref.weight)
    ref, ours = ref.to(torch.bfloat16), ours.to(torch.bfloat16)
    naive = torch.nn.functional.rms_norm(x, (64,), ours.weight, 1e-5)  # normalised in bf16: not the same
    assert torch.equal(ours(x), ref(x)) and not torch.equal(naive, ref(x))
    d = make_tiny_model(tmp_path / "m", seed=5)
    m16, m32 = load_model(d, dtype=torch.bfloat16), load_model(d, dtype=torch.float32)
    final = LlamaRMSNorm(m16.args.hidden_size, eps=m16.args.rms_norm_eps).to(torch.bfloat16)
    with torch.no_grad():
        final.weight.copy_(m16.norm.weight)
    h = torch.randn(5, m16.args.hidden_size, generator=g).to(torch.bfloat16)
    assert torch.equal(LeanTarget(m16).final_norm(h), final(h))
    pos = torch.arange(40)
    assert torch.equal(m16._rope_at(pos, 40), m32._rope_at(pos, 40))
