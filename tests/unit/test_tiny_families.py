"""The tiny random families: each is made by transformers, loads with AutoModelForCausalLM and runs a
forward; with MTP, the checkpoint carries the family's MTP layers under the names vLLM reads; the Gemma 4
assistant runs on the tiny Gemma 4 target's shared KV (transformers' own assisted-decoding inputs)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specgauge.testing.tiny_families import FAMILIES, MTP_FAMILIES, VOCAB, make_tiny_family  # noqa: E402

# the checkpoint keys vLLM 0.32's *_mtp.py load, per family (one representative each)
MTP_KEYS = {
    "deepseek_v3": ["model.layers.2.enorm.weight", "model.layers.2.hnorm.weight", "model.layers.2.eh_proj.weight",
                    "model.layers.2.shared_head.norm.weight", "model.layers.2.shared_head.head.weight",
                    "model.layers.2.self_attn.kv_a_proj_with_mqa.weight",
                    "model.layers.2.mlp.experts.0.up_proj.weight",
                    "model.layers.2.mlp.gate.e_score_correction_bias"],
    "glm4_moe": ["model.layers.2.enorm.weight", "model.layers.2.eh_proj.weight",
                 "model.layers.2.self_attn.q_proj.weight",
                 "model.layers.2.mlp.shared_experts.up_proj.weight"],
    "qwen3_next": ["mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                   "mtp.norm.weight",
                   "mtp.layers.0.self_attn.q_proj.weight", "mtp.layers.0.mlp.shared_expert_gate.weight"],
    "qwen3_5_moe": ["mtp.fc.weight", "mtp.layers.0.self_attn.k_norm.weight", "mtp.layers.0.mlp.experts.3.down_proj.weight"],
    "mimo": ["model.mtp_layers.0.token_layernorm.weight", "model.mtp_layers.0.hidden_layernorm.weight",
             "model.mtp_layers.0.input_proj.weight", "model.mtp_layers.0.final_layernorm.weight",
             "model.mtp_layers.0.self_attn.q_proj.bias"],
}
TARGETS = [f for f in FAMILIES if f != "gemma4_assistant"]


def _forward(path, n=10):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    ids = torch.tensor([tok.encode("def add(a, b): return a + b")[:n]])
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    return model, ids, out


@pytest.mark.parametrize("family", TARGETS)
def test_family_loads_and_runs(family, tmp_path):
    make_tiny_family(family, tmp_path / family)
    model, ids, out = _forward(tmp_path / family)
    assert out.logits.shape == (1, ids.shape[1], VOCAB)
    assert torch.isfinite(out.logits).all()
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    # random but not degenerate: the greedy next tokens are not all one token
    assert len(set(out.logits[0].argmax(-1).tolist())) > 1


@pytest.mark.parametrize("family", MTP_FAMILIES)
def test_mtp_weights_under_vllm_names(family, tmp_path):
    from safetensors import safe_open

    plain = make_tiny_family(family, tmp_path / "plain")
    mtp = make_tiny_family(family, tmp_path / "mtp", with_mtp=True)
    with safe_open(str(mtp / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        for k in MTP_KEYS[family]:
            assert k in keys, k
        # the MTP block is the family's own layer: same tensor names as a target layer of that kind
        w = f.get_tensor(MTP_KEYS[family][0])
    assert torch.isfinite(w).all()
    cfg = json.loads((mtp / "config.json").read_text())
    assert cfg.get("num_nextn_predict_layers", cfg.get("mtp_num_hidden_layers")) == 1
    # the target itself is unchanged by the MTP layers (transformers ignores them on load)
    _, _, a = _forward(plain)
    _, _, b = _forward(mtp)
    assert torch.equal(a.logits, b.logits)


def test_two_mtp_layers(tmp_path):
    from safetensors import safe_open

    d = make_tiny_family("deepseek_v3", tmp_path / "ds", with_mtp=True, num_mtp_layers=2)
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        assert {"model.layers.2.eh_proj.weight", "model.layers.3.eh_proj.weight"} <= set(f.keys())
    assert json.loads((d / "config.json").read_text())["num_nextn_predict_layers"] == 2


def test_gemma4_assistant_runs_on_target_kv(tmp_path):
    from transformers import Gemma4AssistantForCausalLM

    make_tiny_family("gemma4", tmp_path / "t")
    make_tiny_family("gemma4_assistant", tmp_path / "a")
    target, ids, _ = _forward(tmp_path / "t")
    assistant = Gemma4AssistantForCausalLM.from_pretrained(str(tmp_path / "a"), local_files_only=True)
    assert assistant.config.backbone_hidden_size == target.config.hidden_size
    with torch.no_grad():
        out = target(ids, output_hidden_states=True, return_shared_kv_states=True)
        kv = out.shared_kv_states
        assert set(kv) == {"sliding_attention", "full_attention"}
        emb = target.get_input_embeddings()(ids[:, -1:])
        a = assistant(inputs_embeds=torch.cat([emb, out.hidden_states[-1][:, -1:]], dim=-1),
                      position_ids=torch.tensor([[ids.shape[1] - 1]]), shared_kv_states=dict(kv))
    assert a.logits.shape == (1, 1, VOCAB)
    assert a.last_hidden_state.shape == (1, 1, target.config.hidden_size)
    # centroid-masked top-k: only top_k * (V / centroids) tokens get a real logit
    n_real = (a.logits[0, 0] > a.logits[0, 0].min()).sum().item()
    assert n_real <= assistant.config.centroid_intermediate_top_k * VOCAB // assistant.config.num_centroids


def test_unknown_family_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not one of"):
        make_tiny_family("nope", tmp_path)
    with pytest.raises(ValueError, match="no native MTP"):
        make_tiny_family("llama", tmp_path, with_mtp=True)
