"""``specgauge serve``: the embedded engine behind an OpenAI-compatible API (flags -> one call)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specgauge.cli.common import LangOpt, err_console, user_errors
from specgauge.config import ConfigError


@user_errors
def serve(
    model: Annotated[Path | None, typer.Option("--model", help="Target model directory (HF layout). Default: the shipped tiny target.")] = None,
    speculative_config: Annotated[str | None, typer.Option("--speculative-config", help="vLLM's --speculative-config JSON, e.g. '{\"model\": \"DRAFT_DIR\", \"num_speculative_tokens\": 4}'.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to bind (loopback unless told otherwise).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535)] = 8000,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Require 'Authorization: Bearer KEY' on /v1/*.")] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, help="Requests decoded together (KV-cache slots).")] = 8,
    max_model_len: Annotated[int, typer.Option("--max-model-len", min=16)] = 2048,
    dtype: Annotated[str, typer.Option("--dtype", help="float32 | bfloat16 | float16 | float64")] = "float32",
    device: Annotated[str, typer.Option("--device", help="cpu | cuda | cuda:N: where the models, KV caches and steps run (eager PyTorch, no CUDA graphs).")] = "cpu",
    served_model_name: Annotated[str | None, typer.Option("--served-model-name", help="The model's name in the API and in /metrics labels. Default: the model directory's name (never its path).")] = None,
    per_request_spec_decode_metrics: Annotated[str | None, typer.Option("--per-request-spec-decode-metrics", help="summary | detailed: metrics.speculative_decoding in responses, as vLLM.")] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="torch CPU threads (1 is best for tiny models on a busy machine).")] = None,
    lang: LangOpt = None,
) -> None:
    """Serve the embedded reference engine (CPU, or CUDA with --device) with vLLM's metric names."""
    from specgauge.config import SpeculativeConfig

    spec = SpeculativeConfig.from_json(speculative_config) if speculative_config else None  # before torch loads
    from specgauge.engine.serve import serve as run
    from specgauge.nn.transformer import ModelLoadError
    from specgauge.nn.weights import torch_device, torch_dtype

    try:  # before any model loads: a bad device or dtype is one line, at once
        torch_device(device)
        torch_dtype(dtype)
    except ValueError as e:
        from specgauge.i18n import t

        err_console.print(f"[bold red]{t('cli.error')}[/bold red] {e}", highlight=False, markup=True)
        raise typer.Exit(2) from None

    if model is None:
        model = Path(__file__).resolve().parent.parent / "models" / "tiny-target"
    if per_request_spec_decode_metrics not in (None, "summary", "detailed"):
        raise typer.BadParameter("must be summary or detailed", param_hint="--per-request-spec-decode-metrics")
    try:
        from specgauge.i18n import t

        run(model, spec, host=host, port=port, api_key=api_key, max_batch=max_batch,
            max_model_len=max_model_len, dtype=dtype, served_model_name=served_model_name,
            per_request_spec_decode_metrics=per_request_spec_decode_metrics, num_threads=threads, device=device,
            on_ready=lambda url: err_console.print(t("cli.serving", model=model, url=url)))
    except (ConfigError, ModelLoadError, ValueError) as e:
        from specgauge.i18n import t, translate

        err_console.print(f"[bold red]{t('cli.error')}[/bold red] {translate(str(e))}", highlight=False)
        raise typer.Exit(2) from None
