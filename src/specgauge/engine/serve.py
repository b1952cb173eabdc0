"""``serve(...)``: load the models, build the app, run uvicorn (what ``specgauge serve`` calls)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgauge.config import ConfigError, SpeculativeConfig


def default_served_name(model_dir: str | Path) -> str:
    """The name the API serves a model under when none is given: its directory's name, never its path
    (results and /metrics labels then carry no machine paths)."""
    return Path(model_dir).resolve().name


def build_app(
    model_dir: str | Path,
    speculative_config: SpeculativeConfig | str | None = None,
    *,
    api_key: str | None = None,
    max_batch: int = 8,
    max_model_len: int = 2048,
    dtype: str = "float32",
    served_model_name: str | None = None,
    per_request_spec_decode_metrics: str | None = None,
    max_request_bytes: int = 1 << 20,
    num_threads: int | None = None,
    device: str = "cpu",
) -> Any:
    """The FastAPI app for ``model_dir`` (a Hugging Face directory with tokenizer files)."""
    import torch
    from transformers import AutoTokenizer

    from specgauge.engine.core import Engine
    from specgauge.engine.server import create_app
    from specgauge.engine.service import ServerSettings

    if per_request_spec_decode_metrics not in (None, "summary", "detailed"):
        raise ValueError("per_request_spec_decode_metrics must be 'summary' or 'detailed'")
    if isinstance(speculative_config, str):
        speculative_config = SpeculativeConfig.from_json(speculative_config)
    if num_threads:
        torch.set_num_threads(num_threads)
    engine = Engine(model_dir, speculative_config, max_batch=max_batch, max_model_len=max_model_len, dtype=dtype, device=device)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    settings = ServerSettings(
        model_name=served_model_name or default_served_name(model_dir), api_key=api_key, max_request_bytes=max_request_bytes,
        per_request_spec_metrics=per_request_spec_decode_metrics,
        speculative_config=_stated(speculative_config),
    )
    return create_app(engine, tokenizer, settings)


def _stated(spec: SpeculativeConfig | None) -> dict[str, Any] | None:
    """The config as /v1/models states it: what it was given, a draft model by its directory's name
    (no machine path; bench's replay check needs a local copy of it anyway)."""
    if spec is None or spec.method is None:
        return None
    d = spec.model_dump(exclude_none=True)
    if spec.model:
        d["model"] = Path(spec.model).name
    return d


def serve(
    model_dir: str | Path,
    speculative_config: SpeculativeConfig | str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    on_ready: Callable[[str], None] | None = None,
    **options: Any,
) -> None:
    """Serve until interrupted. Binds loopback unless ``host`` says otherwise. ``options``: see
    :func:`build_app`. The models are loaded and the port bound before ``on_ready(url)`` is called, so
    a bad config, model or port fails before anything says the server is up."""
    import uvicorn

    app = build_app(model_dir, speculative_config, **options)
    sock = _bind(host, port)
    if on_ready is not None:
        on_ready(f"http://{f'[{host}]' if ':' in host else host}:{port}")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, as uvicorn binds one (``Config.bind_socket``), or a ``ConfigError`` naming
    the flags (uvicorn itself logs and exits)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"--host {host} --port {port}: cannot listen there: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock
