"""What every command module shares: the consoles, the user-error wrapper and common option types.

Command modules import from here only (never from ``specgauge.cli`` itself), and they define plain
functions; ``specgauge.cli.__init__`` registers them on the one typer app. So the CLI sits above
every library package and nothing below it imports it back.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from specgauge.units import parse_int_list  # noqa: F401  (the CLI modules import it from here)

console = Console()
if not console.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
    console = Console(width=140)
err_console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 200)

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn specgauge's own error types into one line on stderr and exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from specgauge.errors import USER_ERRORS

        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            err_console.print(f"[bold red]error:[/bold red] {e}", highlight=False, markup=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


WorkloadArg = Annotated[
    list[Path] | None,
    typer.Argument(help="Workload file(s): OpenAI JSONL, Batch API input+output, ShareGPT, vllm custom, text. "
                   "gzip/zstd fine. Default: the built-in sample workload."),
]
FormatOpt = Annotated[str | None, typer.Option("--format", help="Override format detection: openai, batch, sharegpt, vllm-custom, text; trace importers: otlp, langfuse, litellm, vllm-log.")]
SegmentOpt = Annotated[str | None, typer.Option("--segment-by", help="Field path (e.g. metadata.team) or 're:REGEX' over the system prompt.")]
SkipOpt = Annotated[bool, typer.Option("--skip-invalid", help="Skip malformed requests (counted) instead of stopping.")]
TokOpt = Annotated[str | None, typer.Option("--tokenizer", help="HF tokenizer directory, or tiktoken:NAME. Default: the shipped model's tokenizer when present, else an approximation.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Use at most this many requests.")]
ServerNiceOpt = Annotated[int, typer.Option("--server-nice", min=0, max=19, help="Start servers this much nicer than the load generator (0-19): where the client shares cores with the server, a busy server cannot delay the client's chunk timestamps (bench warns when its event loop ran late).")]
LangOpt = Annotated[str | None, typer.Option("--lang", help="Language of the report, verdict lines and console summaries: en or ko (default: from the locale; LANG/LC_ALL starting with ko gives ko).")]


def workload_paths(paths: list[Path] | None) -> list[Path]:
    """The given workload files, or the built-in sample (with logged responses where shipped)."""
    if paths:
        return paths
    from specgauge.workload.samples import sample_logged_path, sample_path

    logged = sample_logged_path()
    return [logged if logged.is_file() else sample_path()]


