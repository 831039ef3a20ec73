"""mkdocs hooks: a command page's options table is written from the command itself.

A page asks for it with ``<!-- options: run -->``; the table lists each option of
``trainmedic run`` with its help text and default, read from the CLI at build time, so the page
lists exactly the options the command has.
"""

from __future__ import annotations

import re

import typer

_MARKER = re.compile(r"<!--\s*options:\s*(?P<command>[\w-]+)\s*-->")


def on_page_markdown(markdown: str, page, config, files) -> str:
    return _MARKER.sub(lambda m: options_table(m["command"]), markdown)


def options_table(name: str) -> str:
    from trainmedic.cli.main import app

    command = typer.main.get_command(app).commands.get(name)  # type: ignore[attr-defined]
    if command is None:
        raise ValueError(f"<!-- options: {name} -->: trainmedic has no command {name!r}")
    rows = ["| option | what it does | default |", "|---|---|---|"]
    for param in command.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        names = ", ".join(f"`{opt}`" for opt in (*param.opts, *param.secondary_opts))
        if not param.is_flag and param.metavar:
            names += f" `{param.metavar}`"
        default = "" if param.is_flag or param.default in (None, (), []) else f"`{param.default}`"
        rows.append(f"| {_cell(names)} | {_cell(param.help or '')} | {default} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
