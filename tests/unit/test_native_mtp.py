"""Native MTP heads on the tiny families (DeepSeek-V3: MLA + MoE; GLM-4-MoE; Qwen3-Next and Qwen3.5:
gated full attention + MoE; MiMo: Qwen2): the chain's split of the family's own decoder layer is exact,
the MTP weights come out of the target's checkpoint as transformers' own layer holds them, and the
multi-module rule (vLLM's V2 runner) starts where the chain does."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specgauge.drafters.heads.chain import attend, levels  # noqa: E402
from specgauge.testing.tiny_families import MTP_FAMILIES, make_tiny_family  # noqa: E402

FAMILIES = ["deepseek_v3", "glm4_moe", "qwen3_next", "mimo"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cache: dict[tuple[str, int], object] = {}

    def get(family: str, n: int = 1):
        if (family, n) not in cache:
            cache[(family, n)] = make_tiny_family(family, tmp_path_factory.mktemp(f"{family}{n}"), with_mtp=True,
                                                  num_mtp_layers=n)
        return cache[(family, n)]

    return get


@pytest.mark.parametrize("family", FAMILIES)
def test_hooked_split_is_the_layer(family, tiny):
    """q/k/v out of the family's layer, the chain's attention, the rest of the layer: equal to the
    layer's own forward with a causal mask (MLA, output gates and MoE included)."""
    from transformers import AutoModelForCausalLM

    from specgauge.drafters.heads.hooked import HookedBlock

    m = AutoModelForCausalLM.from_pretrained(str(tiny(family)), attn_implementation="eager").eval()
    types = getattr(m.config, "layer_types", None) or ["full_attention"] * m.config.num_hidden_layers
    layer = m.model.layers[max(i for i, t in enumerate(types) if t == "full_attention")]
    N = 6
    x = torch.randn(N, m.config.hidden_size, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(4, 4 + N)
    with torch.no_grad():
        pe = m.model.rotary_emb(x[None], pos[None])
        mask = torch.full((N, N), float("-inf")).triu(1)[None, None]
        ref = layer(hidden_states=x[None], position_embeddings=pe, attention_mask=mask, position_ids=pos[None])
        ref = (ref[0] if isinstance(ref, tuple) else ref)[0]
        mine = copy.deepcopy(layer)
        mine.self_attn.config = copy.deepcopy(layer.self_attn.config)
        hb = HookedBlock(mine, lambda p: pe)
        q, k, v, s = hb.qkv(x, pos)
        causal = torch.arange(N)[None, :] <= torch.arange(N)[:, None]
        out = hb.finish(x, pos, attend(q, [(k, v, causal)], k.shape[1], s))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert m.config._attn_implementation == "eager"  # the target's own config is left alone


@pytest.mark.parametrize("family", [*FAMILIES, "qwen3_5_moe"])
def test_mtp_block_is_the_checkpoints_layer(family, tiny):
    """The head's block holds the tensors tiny_families wrote (layer N of a transformers model of the
    family, saved unfused): transformers' conversion put them back where the family's layer has them."""
    from specgauge.drafters.heads.loader import load_head
    from specgauge.targets.hf import TransformersTarget
    from specgauge.testing import tiny_families as tf

    d = tiny(family)
    target = TransformersTarget.open(d)
    head = load_head(d, target)
    build = tf._BUILDERS[family][0]
    full = tf._random_model(build(tf.LAYERS + 1), 100)  # make_tiny_family(seed=0) builds the blocks with seed + 100
    want = full.model.layers[tf.LAYERS].state_dict()
    got = head.blocks[0].state_dict()
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], msg=k)
    # the embedding and lm_head are the target's, never the checkpoint's own copies (vLLM shares them)
    torch.testing.assert_close(head.lm_head.weight, target.lm_head_weight())
    assert head.spec.aux_layer_ids == ("final",)


@pytest.mark.parametrize("family", FAMILIES)
def test_levels_run_and_multi_module_starts_as_the_chain(family, tiny):
    from specgauge.drafters.heads.loader import load_head
    from specgauge.drafters.heads.mtp_native import levels_for, multi_module_levels
    from specgauge.targets.hf import TransformersTarget

    d = tiny(family, 2)
    target = TransformersTarget.open(d)
    head = load_head(d, target)
    assert head.n == 2
    ids = list(range(5, 25))
    tp = target.run(ids, head.spec.aux_layer_ids)
    nxt = torch.tensor(ids[1:] + [3])
    with torch.no_grad():
        chain = levels(head, nxt, tp.flat(), 3)
        multi = multi_module_levels(head, nxt, tp.flat(), 3)
    assert [x.shape for x in chain] == [x.shape for x in multi] == [(len(ids), 320)] * 3
    torch.testing.assert_close(chain[0], multi[0])  # step 1: MTP layer 0 on the target's hidden states
    assert not torch.allclose(chain[1][1:], multi[1][1:])  # step 2: layer 0 again (V1) vs layer 1 (V2)
    assert levels_for(head, "v1", 3) == "chain" and levels_for(head, "v2", 3) == "multi_module"
    assert levels_for(head, "v2", 1) == "chain"


def test_no_mtp_weights_is_one_clear_error(tmp_path):
    from specgauge.drafters.heads.config import HeadLoadError
    from specgauge.drafters.heads.loader import load_head
    from specgauge.targets.hf import TransformersTarget

    d = make_tiny_family("glm4_moe", tmp_path / "g")
    with pytest.raises(HeadLoadError, match="declares no MTP layers"):
        load_head(d, TransformersTarget.open(d))
    assert "glm4_moe" in MTP_FAMILIES
