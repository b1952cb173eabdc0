"""Load a local Hugging Face checkpoint (``config.json`` + ``*.safetensors``) into the lean
:class:`~specgauge.nn.transformer.Transformer`: q/k projection rows reordered so each head's RoPE halves
are interleaved (see the transformer's module docstring), gate/up and q/k/v fused. ``torch_dtype``: the
one spelling of the dtypes the engine and the drafters accept.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor

from specgauge.nn.transformer import ModelArgs, ModelLoadError, Transformer

_DTYPES = ("float32", "bfloat16", "float16", "float64")


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in _DTYPES:
        raise ValueError(f"dtype {name!r} not supported; use one of {', '.join(_DTYPES)}")
    return getattr(torch, name)


def torch_device(name: str | torch.device) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N``: the one check of the device the engine and its drafters run on
    (a clear one-line error where torch sees no such device)."""
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {name!r} not supported; use cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {name!r} not supported; use cpu, cuda or cuda:N")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "it was built without CUDA" if torch.version.cuda is None else "it finds no GPU"
            raise ValueError(f"device {name!r}: no CUDA device is visible to torch {torch.__version__} ({why}); use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return dev


def read_safetensors(
    model_dir: Path, error: type[Exception] = ModelLoadError, hint: str = " (pytorch_model.bin is not read)"
) -> dict[str, Tensor]:
    """Every tensor of the directory's ``*.safetensors`` files (sorted by name, later files win);
    ``error`` names the directory when there is none."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise error(f"{model_dir}: no *.safetensors weights{hint}")
    sd: dict[str, Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    return sd


def _interleave_halves(w: Tensor, head_dim: int) -> Tensor:
    """Reorder each head's rows [x_0..x_{D/2-1}, y_0..y_{D/2-1}] to [x_0, y_0, x_1, y_1, ...] (RoPE pairs adjacent)."""
    shape = w.shape
    return w.reshape(-1, 2, head_dim // 2, *shape[1:]).transpose(1, 2).reshape(shape)


#: a ``config.json`` key: a directory without weights gets random ones, seeded (``{"seed": 0}``) — for
#: measuring a model shape's step cost (benchmarks/gpu), never for its outputs
RANDOM_WEIGHTS_KEY = "specgauge_random_weights"


def load_model(model_dir: str | Path, dtype: torch.dtype = torch.float32) -> Transformer:
    """Load a Llama / Qwen2 / Qwen3 checkpoint into the lean :class:`Transformer` (eval mode), on torch's
    default device (the engine enters ``with torch.device(...)`` around it)."""
    model_dir = Path(model_dir)
    a = ModelArgs.from_dir(model_dir)
    random_init = _random_weights(model_dir)
    if random_init is not None:
        return _random_model(a, dtype, int(random_init.get("seed", 0)))
    sd = read_safetensors(model_dir)
    sd = {k.removeprefix("model."): v for k, v in sd.items()}

    def take(name: str) -> Tensor:
        try:
            return sd.pop(name)
        except KeyError:
            raise ModelLoadError(f"{model_dir}: weight {name!r} missing") from None

    D = a.head_dim
    new: dict[str, Tensor] = {"embed.weight": take("embed_tokens.weight"), "norm.weight": take("norm.weight")}
    head = sd.pop("lm_head.weight", None)
    if head is None:
        if not a.tie_word_embeddings:
            raise ModelLoadError(f"{model_dir}: lm_head.weight missing and tie_word_embeddings is false")
        head = new["embed.weight"]
    new["lm_head.weight"] = head
    for i in range(a.num_layers):
        p = f"layers.{i}."
        q, k, v = (take(p + f"self_attn.{n}_proj.weight") for n in "qkv")
        new[p + "wqkv.weight"] = torch.cat([_interleave_halves(q, D), _interleave_halves(k, D), v])
        if a.qkv_bias:
            qb, kb, vb = (take(p + f"self_attn.{n}_proj.bias") for n in "qkv")
            new[p + "wqkv.bias"] = torch.cat([_interleave_halves(qb, D), _interleave_halves(kb, D), vb])
        new[p + "wo.weight"] = take(p + "self_attn.o_proj.weight")
        new[p + "w13.weight"] = torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")])
        new[p + "w2.weight"] = take(p + "mlp.down_proj.weight")
        new[p + "attn_norm.weight"] = take(p + "input_layernorm.weight")
        new[p + "ffn_norm.weight"] = take(p + "post_attention_layernorm.weight")
        if a.qk_norm:
            new[p + "q_norm.weight"] = _interleave_halves(take(p + "self_attn.q_norm.weight"), D)
            new[p + "k_norm.weight"] = _interleave_halves(take(p + "self_attn.k_norm.weight"), D)
    with torch.device("meta"):
        model = Transformer(a)
    model.load_state_dict(new, strict=True, assign=True)
    model = model.to(device=torch.get_default_device(), dtype=dtype)
    return model.eval()


def _random_weights(model_dir: Path) -> dict | None:
    """The directory's ``RANDOM_WEIGHTS_KEY`` settings when it asks for random weights and holds none."""
    import json

    if any(model_dir.glob("*.safetensors")):
        return None
    try:
        cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    v = cfg.get(RANDOM_WEIGHTS_KEY)
    return (v if isinstance(v, dict) else {}) if v else None


def _random_model(a: ModelArgs, dtype: torch.dtype, seed: int) -> Transformer:
    """Random weights made where the model runs (8 B parameters in seconds on a GPU), the same for a seed
    on the same device and torch: every server of one shape answers a greedy request alike."""
    torch.manual_seed(seed)
    model = Transformer(a)  # parameters on the default device, torch's default initialisation
    model = model.to(dtype)
    return model.eval()


__all__ = ["RANDOM_WEIGHTS_KEY", "load_model", "torch_device", "torch_dtype"]
