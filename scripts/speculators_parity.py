"""Our EAGLE-3 chain held to speculators' own training-time-test forward (vllm-project/speculators 0.9.0).

speculators 0.9.0 does not install beside specgauge (it pins transformers <= 5.19.0, specgauge runs 5.25,
and pulls torchvision / torchaudio / datasets), so this runs in two interpreters:

1. ``--their PYTHON``: a venv where ``import speculators`` works (e.g. an overlay on specgauge's venv with
   ``pip install --no-deps speculators==0.9.0 transformers==5.19.0 loguru pydantic-settings datasets``)
   builds a random ``Eagle3DraftModel``, runs its forward with the true tokens (teacher forcing, every
   TTT step) and ``save_pretrained``s it — a speculators-format checkpoint;
2. this interpreter loads that checkpoint through specgauge's one loader (nested layout) and runs
   ``chain.levels`` on the same hidden states and tokens: step s of slot q must equal level s, row q + s.

    python scripts/speculators_parity.py --their /tmp/specov/bin/python [--norm-before-residual]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

THEIR_SIDE = textwrap.dedent('''
    import sys, torch
    from transformers import LlamaConfig
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    out, nbr, V, H, T, S = sys.argv[1], sys.argv[2] == "1", 256, 64, 40, 4
    torch.manual_seed(0)
    lc = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, max_position_embeddings=512)
    sc = SpeculatorsConfig(algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=S)],
                           default_proposal_method="greedy", verifier=VerifierConfig(name_or_path=None, architectures=[]))
    cfg = Eagle3SpeculatorConfig(transformer_layer_config=lc, draft_vocab_size=V, norm_before_residual=nbr,
                                 eagle_aux_hidden_state_layer_ids=[1, 2, 3], speculators_config=sc)
    cfg.transformer_layer_config._attn_implementation = "sdpa"
    m = Eagle3DraftModel(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2) + (1.0 if p.dim() == 1 else 0.0))
    m.eval()
    hid, ids = torch.randn(1, T, 3 * H), torch.randint(0, V, (1, T))
    with torch.no_grad():
        drafts = m(hid, ids, torch.zeros_like(ids), ttt_steps=S)
    m.save_pretrained(out)
    torch.save({"hid": hid, "ids": ids, "drafts": torch.stack([d[0] for d in drafts])}, out + "/case.pt")
''')


def main(argv: list[str] | None = None) -> int:
    import torch

    from specgauge.drafters.heads import chain
    from specgauge.drafters.heads.loader import load_head
    from specgauge.targets.lean import LeanTarget
    from specgauge.testing.engine import make_tiny_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--their", required=True, help="a Python that imports speculators 0.9.0")
    p.add_argument("--norm-before-residual", action="store_true")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        head_dir = Path(tmp) / "head"
        subprocess.run([a.their, "-c", THEIR_SIDE, str(head_dir), "1" if a.norm_before_residual else "0"], check=True)
        target = LeanTarget.open(make_tiny_model(Path(tmp) / "t", vocab_size=256, hidden=64, layers=4, seed=1))
        head = load_head(head_dir, target)  # the nested layout through the one loader
        case = torch.load(head_dir / "case.pt")
        hid, ids, theirs = case["hid"][0], case["ids"][0], case["drafts"]
        with torch.inference_mode():
            lv = chain.levels(head, ids, hid, theirs.shape[0])
        S, T = theirs.shape
        agree = sum(int(lv[s].argmax(-1)[q + s] == theirs[s, q]) for s in range(S) for q in range(T - s))
        total = sum(T - s for s in range(S))
    print(f"speculators 0.9.0 vs specgauge's chain (norm_before_residual={a.norm_before_residual}): "
          f"{agree}/{total} drafts equal")
    return 0 if agree == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
