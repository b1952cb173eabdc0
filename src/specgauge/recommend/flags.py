"""Server flags for a recommended configuration: vLLM (exact), llama.cpp and SGLang (where they map).

- vLLM: ``vllm serve MODEL --speculative-config '{…}'``, the JSON measured (with a
  ``num_speculative_tokens_per_batch_size`` schedule when k changes with batch size); no flag for "off".
- llama.cpp (``llama-server``, build b11434 flags): a draft model is ``-md DRAFT.gguf --spec-type
  draft-simple --spec-draft-n-max K --spec-draft-n-min 0``; n-gram is ``--spec-type ngram-simple
  --spec-ngram-simple-size-n N --spec-ngram-simple-size-m K`` (one lookup length, where vLLM tries
  prompt_lookup_max down to prompt_lookup_min). No batch-size schedule and no suffix decoding.
- SGLang: ``--speculative-algorithm NGRAM`` / ``STANDALONE`` / ``EAGLE`` / ``EAGLE3`` with
  ``--speculative-num-steps K --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1``; no
  batch-size schedule, no suffix decoding; its NGRAM drafter is not vLLM's prompt lookup.
- Hidden-state heads: EAGLE-3 is ``{"method":"eagle3","model":HEAD,...}`` in vLLM and ``EAGLE3`` with
  ``--speculative-draft-model-path HEAD`` in SGLang. An MTP head is the target's own layers in both:
  vLLM ``{"method":"mtp","num_speculative_tokens":K}`` (no ``model``: vLLM reads them from the target's
  checkpoint), SGLang ``--speculative-algorithm EAGLE`` without a draft path (its NEXTN alias). llama.cpp
  has neither.
- Gemma 4's assistant: vLLM ``{"method":"mtp","model":ASSISTANT,...}`` (its own checkpoint). P-EAGLE:
  ``{"method":"eagle3","model":HEAD,"parallel_drafting":true,...}``. DSpark: ``{"method":"dspark","model":HEAD,...}``
  (``enable_adaptive_verification`` kept as given). No SGLang or llama.cpp mapping for these three here.
- DFlash (block-parallel head): vLLM ``{"method":"dflash","model":HEAD,"num_speculative_tokens":K}``;
  SGLang ``--speculative-algorithm DFLASH --speculative-draft-model-path HEAD --speculative-num-draft-tokens
  K+1`` (its block: the anchor and K masks; SGLang forces num-steps and topk to 1). llama.cpp has none.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from specgauge.config import SpeculativeConfig
from specgauge.recommend.models import Flags
from specgauge.recommend.schedule import k_at


def spec_json(spec: dict[str, Any]) -> str:
    return json.dumps(spec, separators=(",", ":"))


def vllm_command(spec: dict[str, Any] | None, model: str = "MODEL") -> str:
    if spec is None:
        return f"vllm serve {shlex.quote(model)}"
    return f"vllm serve {shlex.quote(model)} --speculative-config {shlex.quote(spec_json(spec))}"


def _gguf(path: str) -> str:
    return f"{Path(path).name or 'DRAFT'}.gguf"


def _single_k(spec: dict[str, Any], sc: SpeculativeConfig, notes: list[str], engine: str) -> int:
    k = int(sc.num_speculative_tokens or 0)
    sched = spec.get("num_speculative_tokens_per_batch_size")
    if sched:
        k1 = min(k, k_at(sched, 1))
        notes.append(f"{engine} has no batch-size schedule: k = {k1} is the schedule's k for one request per step; "
                     f"use the schedule's k for your usual number of concurrent requests ({spec_json(sched)})")
        return k1
    return k


def llamacpp_command(spec: dict[str, Any] | None, model: str = "MODEL") -> tuple[str | None, list[str]]:
    m = shlex.quote(_gguf(model) if model != "MODEL" else "MODEL.gguf")
    if spec is None:
        return f"llama-server -m {m}", []
    sc = SpeculativeConfig.model_validate(spec)
    notes: list[str] = []
    k = _single_k(spec, sc, notes, "llama.cpp")
    if k == 0:
        notes.append("k = 0 for one request per step: llama.cpp without speculation")
        return f"llama-server -m {m}", notes
    if sc.method == "draft_model":
        draft = _gguf(sc.model or "DRAFT")
        notes.append(f"convert the draft model to GGUF first (llama.cpp's convert_hf_to_gguf.py) -> {draft}")
        return (f"llama-server -m {m} -md {shlex.quote(draft)} --spec-type draft-simple --spec-draft-n-max {k} "
                "--spec-draft-n-min 0"), notes
    if sc.method == "ngram":
        n = int(sc.prompt_lookup_min or 2)
        notes.append(f"llama.cpp's ngram-simple looks up one n-gram length ({n}); vLLM tries "
                     f"{sc.prompt_lookup_max} down to {sc.prompt_lookup_min}: acceptance can differ")
        return f"llama-server -m {m} --spec-type ngram-simple --spec-ngram-simple-size-n {n} --spec-ngram-simple-size-m {k}", notes
    if sc.method == "suffix":
        return None, ["llama.cpp has no suffix decoding (its ngram-mod / ngram-cache drafters are different algorithms)"]
    return None, [f"no llama.cpp mapping for method {sc.method!r}"]


def sglang_command(spec: dict[str, Any] | None, model: str = "MODEL") -> tuple[str | None, list[str]]:
    base = f"python -m sglang.launch_server --model-path {shlex.quote(model)}"
    if spec is None:
        return base, []
    sc = SpeculativeConfig.model_validate(spec)
    notes: list[str] = []
    k = _single_k(spec, sc, notes, "SGLang")
    if k == 0:
        notes.append("k = 0 for one request per step: SGLang without speculation")
        return base, notes
    steps = f"--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k + 1}"
    if sc.method == "ngram":
        notes.append("SGLang's NGRAM drafts from a trie of recent tokens, not vLLM's prompt lookup: acceptance differs; "
                     "check --speculative-num-draft-tokens in your SGLang version's --help")
        return f"{base} --speculative-algorithm NGRAM --speculative-num-steps {k} --speculative-num-draft-tokens {k + 1}", notes
    if sc.method == "draft_model":
        return f"{base} --speculative-algorithm STANDALONE --speculative-draft-model-path {shlex.quote(sc.model or 'DRAFT')} {steps}", notes
    if sc.method == "mtp" and separate_mtp_draft(sc.model):
        return None, ["no SGLang mapping for Gemma 4's assistant (vLLM's gemma4_mtp) here"]
    if sc.method == "eagle3" and spec.get("parallel_drafting"):
        return None, ["no SGLang mapping for parallel drafting (P-EAGLE) here; SGLang's EAGLE3 drafts sequentially"]
    if sc.method == "mtp":
        notes.append("SGLang runs a model's native MTP layers through its EAGLE worker (NEXTN is the same "
                     "algorithm); no draft model path")
        return f"{base} --speculative-algorithm EAGLE {steps}", notes
    if sc.method == "dflash":
        return (f"{base} --speculative-algorithm DFLASH --speculative-draft-model-path {shlex.quote(sc.model or 'DRAFT')} "
                f"--speculative-num-draft-tokens {k + 1}"), notes
    if sc.method in ("eagle", "eagle3"):
        return f"{base} --speculative-algorithm {sc.method.upper()} --speculative-draft-model-path {shlex.quote(sc.model or 'DRAFT')} {steps}", notes
    if sc.method == "suffix":
        return None, ["SGLang has no suffix decoding"]
    return None, [f"no SGLang mapping for method {sc.method!r}"]


#: keys the replay reads that vLLM's SpeculativeConfig has not (which model runner's MTP rule to replay)
REPLAY_ONLY = ("mtp_runner",)


def vllm_spec(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The speculative config as vLLM takes it: an MTP head is the target's own layers, so no ``model`` —
    unless it is a draft of its own (Gemma 4's assistant: ``{"method":"mtp","model":ASSISTANT}``); keys only
    the replay reads are left out."""
    if not spec:
        return spec
    out = {k: v for k, v in spec.items() if k not in REPLAY_ONLY}
    if out.get("method") == "mtp" and not separate_mtp_draft(out.get("model")):
        out.pop("model", None)
    return out


def separate_mtp_draft(model: Any) -> bool:
    """Whether ``model`` is a draft vLLM's ``mtp`` method loads on its own (``model_type`` Gemma 4 assistant)
    rather than the target's own MTP layers; read from its config.json where the directory is here."""
    if not model:
        return False
    try:
        cfg = json.loads((Path(str(model)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("model_type") in ("gemma4_assistant", "gemma4_unified_assistant")


def render_flags(spec: dict[str, Any] | None, model: str = "MODEL") -> Flags:
    ll, lln = llamacpp_command(spec, model)
    sg, sgn = sglang_command(spec, model)
    vs = vllm_spec(spec)
    return Flags(vllm=vllm_command(vs, model), vllm_speculative_config=vs, llamacpp=ll, llamacpp_notes=lln,
                 sglang=sg, sglang_notes=sgn)
