"""Regenerate the parts of the docs that are derived from code.

python docs/generate.py          # rewrite the generated pages under docs/reference/
python docs/generate.py --check  # exit 1 if one is stale (the test suite runs this)
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import click

from tether.cli.main import cli
from tether.core import errors
from tether.core.machine import mermaid_diagram

DOCS = Path(__file__).resolve().parent
WIDTH = {"terminal_width": 100, "max_content_width": 100}  # stable output whatever the terminal


def state_machine() -> str:
    return (
        "# The run state machine\n\n"
        "Generated from `tether.core.machine.TRANSITIONS` by `docs/generate.py`; do not edit.\n\n"
        "```mermaid\n" + mermaid_diagram() + "\n```\n"
    )


def cli_reference() -> str:
    parts = ["# CLI reference\n", "Generated from the CLI itself by `docs/generate.py`; do not edit.\n"]
    group = click.Context(cli, info_name="tether", **WIDTH)
    parts.append("```\n" + cli.get_help(group) + "\n```\n")
    for name in sorted(cli.list_commands(group)):
        command = cli.get_command(group, name)
        assert command is not None
        context = click.Context(command, info_name=name, parent=group, **WIDTH)
        parts.append(f"## tether {name}\n\n```\n{command.get_help(context)}\n```\n")
        if name == "eval" and isinstance(command, click.Group):  # `tether eval DATASET` is its `run` subcommand
            for sub_name in sorted(command.list_commands(context)):
                sub = command.get_command(context, sub_name)
                assert sub is not None
                sub_context = click.Context(sub, info_name=sub_name, parent=context, **WIDTH)
                parts.append(f"### tether {name} {sub_name}\n\n```\n{sub.get_help(sub_context)}\n```\n")
    return "\n".join(parts)


def errors_reference() -> str:
    """Every error class, its exit code and its docstring, from ``tether.core.errors``."""
    parts = [
        "# Errors\n",
        "Generated from `tether.core.errors` by `docs/generate.py`; do not edit. Every error tether raises on",
        "purpose is one of these; the CLI exits with the code shown (a run's own status has its own code,",
        "see `tether run --help`).\n",
        "```\n" + errors.tree() + "\n```\n",
    ]
    found = [errors.TetherError]
    for cls in found:
        found.extend(cls.__subclasses__())
    for cls in found:
        doc = inspect.cleandoc(cls.__doc__ or "")
        parts.append(f"## {cls.__name__}\n\nExit {cls.exit_code}. Base: `{cls.__mro__[1].__name__}`.\n\n{doc}\n")
    return "\n".join(parts)


def main() -> int:
    check = "--check" in sys.argv
    stale = []
    pages = (
        (DOCS / "reference" / "state-machine.md", state_machine()),
        (DOCS / "reference" / "cli.md", cli_reference()),
        (DOCS / "reference" / "errors.md", errors_reference()),
    )
    for path, text in pages:
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run python docs/generate.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
