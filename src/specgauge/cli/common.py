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
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

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
            from specgauge.i18n import t, translate

            local = getattr(e, "localised", None)  # a workload error: FILE:LINE kept, its message translated
            text = local(translate) if local is not None else translate(str(e))
            err_console.print(f"[bold red]{t('cli.error')}[/bold red] {text}", highlight=False, markup=True,
                              soft_wrap=True)  # one line, however long, outside a terminal too
            raise typer.Exit(2) from None
        except ValidationError as e:  # a config built from the flags: pydantic's bounds are the flags' bounds
            from specgauge.config import format_validation_error
            from specgauge.i18n import t, translate

            text = format_validation_error(e, flag_names(fn))
            err_console.print(f"[bold red]{t('cli.error')}[/bold red] {escape(translate(text))}",
                              highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            from specgauge.i18n import t

            err_console.print(t("cli.interrupted"))
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def flag_names(fn: Callable[..., Any]) -> dict[str, str]:
    """A command's parameter names -> the flag that sets each (``max_concurrency`` -> ``--max-concurrency``),
    so that an error in the config built from them names the flag the user typed, not the field."""
    import inspect
    import typing

    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no names, the field names stay
        return {}
    out: dict[str, str] = {}
    for name in inspect.signature(fn).parameters:
        for meta in getattr(hints.get(name), "__metadata__", ()):
            # typer.Option("--flag", "-f") in Annotated: the first declaration is stored as the default
            decls = [getattr(meta, "default", None), *(getattr(meta, "param_decls", None) or ())]
            flags = [d for d in decls if isinstance(d, str) and d.startswith("--")]
            if flags:
                out[name] = flags[0]
    return out


WorkloadArg = Annotated[
    list[Path] | None,
    typer.Argument(help="Workload file(s): OpenAI chat/completions JSONL (a request, or a request with its response), "
                   "Batch API input+output, ShareGPT, vllm custom, text; trace exports: OpenTelemetry GenAI (otlp), "
                   "Langfuse (langfuse), LiteLLM logging payloads (litellm), vLLM's request log (vllm-log). "
                   "Detected from the first record (--format overrides); gzip/zstd fine. Default: the built-in sample workload."),
]
FormatOpt = Annotated[str | None, typer.Option("--format", help="Override format detection: openai, batch, sharegpt, vllm-custom, text; trace importers: otlp, langfuse, litellm, vllm-log.")]
SegmentOpt = Annotated[str | None, typer.Option("--segment-by", help="Field path (e.g. metadata.team) or 're:REGEX' over the system prompt.")]
SkipOpt = Annotated[bool, typer.Option("--skip-invalid", help="Skip malformed requests (counted) instead of stopping.")]
TokOpt = Annotated[str | None, typer.Option("--tokenizer", help="HF tokenizer directory, or tiktoken:NAME. Default: the shipped model's tokenizer when present, else an approximation.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Use at most this many requests.")]
ServerNiceOpt = Annotated[int, typer.Option("--server-nice", min=0, max=19, help="Start servers this much nicer than the load generator (0-19): where the client shares cores with the server, a busy server cannot delay the client's chunk timestamps (bench warns when its event loop ran late).")]
def _lang_option(ctx: typer.Context, value: str | None) -> str:
    """``--lang``: the language of everything the command prints or writes, for the whole command (the
    option opens ``i18n.use_lang`` on the command's context; it closes when the command ends)."""
    from specgauge.i18n import LANGS, use_lang

    if value is not None and value not in LANGS:
        raise typer.BadParameter(f"{value!r}: choose one of {', '.join(LANGS)}")
    return ctx.with_resource(use_lang(value, process=True))


LangOpt = Annotated[str | None, typer.Option("--lang", callback=_lang_option, help="Language of everything this command prints or writes (console, report, verdict lines, notes): en or ko (default: from the locale; LANG/LC_ALL starting with ko gives ko).")]


def workload_paths(paths: list[Path] | None) -> list[Path]:
    """The given workload files, or the built-in sample (with logged responses where shipped)."""
    if paths:
        return paths
    from specgauge.workload.samples import sample_logged_path, sample_path

    logged = sample_logged_path()
    return [logged if logged.is_file() else sample_path()]


