"""``VllmDumpTarget``: the hidden states vLLM wrote itself — the production server's own kernels,
quantization and parallelism, on models far too big for transformers on one box.

vLLM (>= 0.18) writes them with ``--speculative-config '{"method": "extract_hidden_states", ...}'`` and
``ExampleHiddenStatesConnector`` (``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``):
one ``{req_id}.safetensors`` per request with

  ``hidden_states`` [tokens, layers, hidden]  the residual streams at ``eagle_aux_hidden_state_layer_ids``,
                                              in ascending layer order (vLLM collects them while it walks
                                              the layers), in the model's dtype
  ``token_ids``     [tokens]                  the prompt's ids (all ids but the last with
                                              ``include_output_tokens``)

``docs/hidden-states.md`` gives the command. A file's ``req_id`` is vLLM's, not the log's: a logged
request is matched by its token ids (the dump of prompt + logged output sent as the prompt). Which layer
ids a directory holds is not in the files: ``layer_ids.json`` beside them says (``write_dump`` writes
it), else the ids the head asks for, sorted as vLLM sorts them, are taken to be the ones it was written
with (a count that does not match is an error).

What a dump does not hold comes from the target's checkpoint, one tensor at a time (safetensors, lazily):
the input embedding and lm_head a head shares, and the final norm (DeepSeek-style MTP reads the
final-norm output: vLLM id N through the target's own norm module, built from its config).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from specgauge.targets.base import LayerId, TargetError, TargetPass, check_layer_ids, check_tokens

LAYERS_FILE = "layer_ids.json"


class VllmDumpTarget:
    """A directory of vLLM hidden-state dumps as a :class:`~specgauge.targets.base.Target`; the target's
    checkpoint directory (config + safetensors) for what the dumps do not hold."""

    def __init__(self, dump_dir: str | Path, checkpoint: str | Path, device: str = "cpu",
                 dtype: torch.dtype | None = None) -> None:
        from transformers import AutoConfig

        self.dir = Path(dump_dir)
        if not self.dir.is_dir():
            raise TargetError(f"--hidden-states {dump_dir}: no such directory")
        self.checkpoint = Path(checkpoint)
        self.name = f"vLLM dumps in {self.dir.name}"
        try:
            cfg = AutoConfig.from_pretrained(str(self.checkpoint), local_files_only=True)
        except (OSError, ValueError) as e:
            raise TargetError(f"--hidden-states {dump_dir}: the target's config is needed beside the dumps "
                              f"(--target-model DIR): {str(e).splitlines()[0]}") from None
        self.model_config = cfg
        self.config = getattr(cfg, "get_text_config", lambda: cfg)()
        self.num_layers = int(self.config.num_hidden_layers)
        self.hidden_size = int(self.config.hidden_size)
        self.vocab_size = int(self.config.vocab_size)
        self.device = torch.device(device)
        self.dtype = dtype or torch.float32
        self._index: dict[tuple[int, ...], Path] | None = None
        self._tensors: dict[str, Tensor] = {}
        self._norms: dict[torch.dtype, Any] = {}  #: the target's final norm module, per input dtype
        side = self.dir / LAYERS_FILE
        self.layer_ids: tuple[int, ...] | None = tuple(json.loads(side.read_text())) if side.is_file() else None

    # -- what the checkpoint gives -----------------------------------------------------------------
    def _module_tensor(self, what: str) -> Tensor:
        """A weight of the target's embedding / lm_head / final norm, read alone from the checkpoint."""
        if what not in self._tensors:
            model = self._skeleton()
            from specgauge.targets.hf import decoder_of

            dec = decoder_of(model)
            mod = {"embed": dec.get_input_embeddings(), "norm": dec.norm,
                   "lm_head": model.get_output_embeddings()}[what]
            if what == "lm_head" and getattr(self.config, "tie_word_embeddings", False):
                mod = dec.get_input_embeddings()
            name = next(n for n, m in model.named_modules() if m is mod) + ".weight"
            self._tensors[what] = _read_tensor(self.checkpoint, name, self.name).to(self.device)
        return self._tensors[what]

    def _skeleton(self) -> Any:
        """The target's module tree without weights (meta device): names and the norm's class."""
        if not hasattr(self, "_meta"):
            from transformers import AutoModelForCausalLM

            with torch.device("meta"):
                self._meta = AutoModelForCausalLM.from_config(self.model_config)
        return self._meta

    def embed_weight(self) -> Tensor:
        return self._module_tensor("embed")

    def embed(self, ids: Tensor) -> Tensor:
        raise TargetError(f"{self.name}: a family-scaled embedding is not read from dumps")

    def lm_head_weight(self) -> Tensor:
        return self._module_tensor("lm_head")

    def final_norm(self, h: Tensor) -> Tensor:
        """The target's own final-norm module (its family's class, the checkpoint's weight) in ``h``'s dtype,
        as the target runs it: a bf16 dump is normalised the way a bf16 target normalises."""
        norm = self._norms.get(h.dtype)
        if norm is None:
            import copy

            from specgauge.targets.hf import decoder_of

            norm = copy.deepcopy(decoder_of(self._skeleton()).norm).to_empty(device=self.device).to(h.dtype)
            with torch.no_grad():
                norm.weight.copy_(self._module_tensor("norm"))
            self._norms[h.dtype] = norm
        with torch.inference_mode():
            return norm(h)  # type: ignore[no-any-return]

    # -- passes ------------------------------------------------------------------------------------
    def _lookup(self, seq: tuple[int, ...]) -> Path:
        if self._index is None:
            from safetensors import safe_open

            self._index = {}
            for f in sorted(self.dir.glob("*.safetensors")):
                with safe_open(str(f), "pt") as st:
                    ids = tuple(int(t) for t in st.get_tensor("token_ids").tolist())
                self._index.setdefault(ids, f)
                self._index.setdefault(ids[:-1], f)  # a dump of prompt + output covers the replay's positions
            if not self._index:
                raise TargetError(f"--hidden-states {self.dir}: no *.safetensors dumps there")
        hit = self._index.get(seq)
        if hit is None:
            raise TargetError(f"--hidden-states {self.dir}: no dump holds this request's {len(seq)} token ids (send "
                              "prompt + logged output as the prompt, as docs/hidden-states.md says)")
        return hit

    def run(self, token_ids: Sequence[int], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = ()) -> TargetPass:
        from safetensors.torch import load_file

        ids = check_layer_ids(layer_ids, self.num_layers, self.name)
        if tuple(kv_layers):
            raise TargetError(f"{self.name}: a dump holds no KV cache (Gemma 4's assistant reads the target's); "
                              "open the target with transformers instead (--target-model without --hidden-states)")
        seq = tuple(check_tokens(token_ids, self.vocab_size, self.name))
        f = self._lookup(seq)
        data = load_file(str(f), device="cpu")
        hs = data["hidden_states"]  # [tokens, layers, hidden]
        ints = sorted({self.num_layers if i == "final" else int(i) for i in ids})
        held = self.layer_ids or tuple(ints)
        if hs.ndim != 3 or hs.shape[1] != len(held) or hs.shape[2] != self.hidden_size:
            raise TargetError(f"{f}: hidden_states has shape {tuple(hs.shape)}; expected [tokens, {len(held)}, "
                              f"{self.hidden_size}] for layers {list(held)}")
        missing = [i for i in ints if i not in held]
        if missing:
            need = "the final norm's input (id N) for 'final'" if "final" in ids and self.num_layers in missing else ""
            raise TargetError(f"{f}: the dump holds layers {list(held)}, not {missing}{' — ' + need if need else ''}")
        n = len(seq)
        cols = []
        for i in ids:
            h = hs[:n, held.index(self.num_layers if i == "final" else int(i))].to(self.device)
            cols.append(self.final_norm(h) if i == "final" else h)
        return TargetPass(seq, torch.stack(cols, 1))

    def passes(self, seqs: Iterable[Sequence[int]], layer_ids: Sequence[LayerId], kv_layers: Sequence[int] = (),
               token_budget: int = 8192) -> Iterator[TargetPass]:
        for s in seqs:
            yield self.run(s, layer_ids, kv_layers)


def _read_tensor(checkpoint: Path, name: str, where: str) -> Tensor:
    from safetensors import safe_open

    for f in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            if name in st.keys():  # noqa: SIM118 - safe_open has keys(), not __contains__
                return st.get_tensor(name)
    raise TargetError(f"{where}: the head needs {name!r}, which a dump does not hold, and the target checkpoint "
                      f"{checkpoint} has no such tensor")


def write_dump(target: Any, seqs: Iterable[Sequence[int]], layer_ids: Sequence[int], out_dir: str | Path,
               names: Sequence[str] | None = None) -> Path:
    """Write ``seqs`` through ``target`` in vLLM's dump format (what ``ExampleHiddenStatesConnector``
    writes for a request whose prompt is the sequence): ``{name}.safetensors`` with ``hidden_states``
    [tokens, layers, hidden] (layers ascending, as vLLM collects them) and ``token_ids`` [tokens];
    plus ``layer_ids.json``. For tests and for a target transformers can run."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = sorted({int(i) for i in layer_ids})
    for n, p in enumerate(target.passes(seqs, ids)):
        name = names[n] if names is not None else f"dump-{n}"
        save_file({"hidden_states": p.hidden.detach().cpu().contiguous(),
                   "token_ids": torch.tensor(p.token_ids, dtype=torch.long)}, str(out / f"{name}.safetensors"))
    (out / LAYERS_FILE).write_text(json.dumps(ids) + "\n")
    return out


__all__ = ["LAYERS_FILE", "VllmDumpTarget", "write_dump"]
