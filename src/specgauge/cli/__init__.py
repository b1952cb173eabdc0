"""Command line: flags -> config -> one library call. Nothing here computes a figure.

Every command lives in one module of this package as a plain function; this file is the one place
where they are registered on the typer app. Command modules import only ``specgauge.cli.common``
and the library, never this module, so there is no import circle.

Errors that are the user's (bad workload line, bad flag value, unreachable server) are printed as one
clear line naming the place, with exit status 2; a traceback means a bug in specgauge.
"""

from __future__ import annotations

import os
from typing import Annotated

import click
import typer
from typer import rich_utils
from typer.core import TyperCommand, TyperGroup

from specgauge import __version__
from specgauge.cli import audit, bench, calibrate, canary, canary_judge, decide, demo, recommend, serve, sweep, workaround, workload
from specgauge.cli.common import console

if not console.is_terminal and not os.environ.get("COLUMNS") and rich_utils.MAX_WIDTH is None:
    # help piped or captured: as wide as the rest of the output (rich's default there is 80 columns)
    rich_utils.MAX_WIDTH = console.width


class _FlagHelp:
    """Help that writes no value placeholder after a flag: typer's rich help writes ``<bool>`` after every
    flag (``--json <bool>``), as if it took a value."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for p in self.get_params(ctx):  # type: ignore[attr-defined]
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""
        super().format_help(ctx, formatter)  # type: ignore[misc]


class _Command(_FlagHelp, TyperCommand):
    pass


class _Group(_FlagHelp, TyperGroup):
    pass


app = typer.Typer(
    name="specgauge",
    help="Does speculative decoding pay off on YOUR workload? Profile, replay, benchmark, decide.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Group,
)


def _version(value: bool) -> None:
    if value:
        console.print(f"specgauge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    pass


#: (module, function) in the order ``specgauge --help`` lists them
COMMANDS = [
    (workload.profile, "profile"),
    (workload.simulate, "simulate"),
    (serve.serve, "serve"),
    (bench.bench, "bench"),
    (decide.compare, "compare"),
    (decide.report, "report"),
    (audit.audit, "audit"),
    (workaround.workaround_path, "workaround-path"),
    (calibrate.calibrate, "calibrate"),
    (calibrate.predict, "predict"),
    (sweep.sweep, "sweep"),
    (recommend.recommend, "recommend"),
    (canary.canary, "canary"),
    (canary_judge.canary_judge, "canary-judge"),
    (demo.demo, "demo"),
]
for _fn, _name in COMMANDS:
    app.command(_name, cls=_Command)(_fn)


def main() -> None:
    app()


__all__ = ["app", "main"]
