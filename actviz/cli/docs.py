"""Write the command reference of ``docs/cli.md`` from the Typer app, so it cannot drift.

``docs/cli.md`` is prose written by hand around generated blocks: each command's usage and
options table sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``
(``actviz`` itself for the global options). Regenerate with::

    python -m actviz.cli.docs            # rewrite docs/cli.md
    python -m actviz.cli.docs --check    # exit 1 if docs/cli.md is stale

Every command must have a block, and every block must name a command: a new command fails the
check until its section is written.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from actviz.output import write_bytes

__all__ = ["COMMAND", "DOCS", "StaleDocs", "reference", "regenerate"]

#: The command that rewrites the file; named by the staleness check's message.
COMMAND = "python -m actviz.cli.docs"
#: The file it writes: docs/cli.md of the source tree.
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

_BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.DOTALL,
)
# How Typer shows a value's type (``<int range>``), as a placeholder in the option column.
_PLACEHOLDERS = {
    "<str>": "TEXT",
    "<list[str]>": "TEXT",
    "<int>": "N",
    "<int range>": "N",
    "<float>": "X",
    "<path>": "PATH",
}


class StaleDocs(ValueError):
    """The file's blocks do not match the app's commands one to one."""


def _commands() -> tuple[Any, dict[str, tuple[Any, Any]]]:
    """The root command and its context, and each command with its context, by name."""
    import typer
    import typer.core
    import typer.main

    from actviz.cli import app

    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)  # an app of several commands
    root_ctx = typer.Context(root, info_name="actviz", **root.context_settings)
    commands = {}
    for name, command in root.commands.items():
        commands[name] = (command, typer.Context(command, info_name=name, parent=root_ctx))
    return (root, root_ctx), commands


def _cell(text: str) -> str:
    """Help text as one table cell: one line, rich's escaped brackets plain, and what Markdown
    would read as a tag, emphasis or a column (``<NN>``, ``layer4.*``, ``_pca``) escaped."""
    text = " ".join(text.replace("\\[", "[").split())
    text = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)
    return text.replace("*", "\\*").replace("<", "\\<").replace("|", "\\|")


def _name(param: Any, ctx: Any) -> str:
    """``-l, --layers TEXT``, ``--capture output|input``, ``MODEL``, ``INPUTS...``."""
    if param.param_type_name == "argument":
        name = str(param.name).upper()
        return name + "..." if param.nargs != 1 else name
    flags = [o for o in param.opts if not o.startswith("--")]
    flags += [o for o in param.opts if o.startswith("--")]
    name = ", ".join(flags)
    if getattr(param, "is_flag", False):
        return name
    shown = param.display_type_rich(ctx=ctx)
    value = param.metavar or _PLACEHOLDERS.get(shown) or shown.strip("<>")
    return f"{name} {value}"


def _default(param: Any) -> str:
    """The default as ``--help`` shows it, or blank for none, off flags and hidden ones."""
    if param.param_type_name == "argument":
        return "required" if param.required else ""
    default = param.default
    if param.show_default is False or default is None or default is False or default == []:
        return ""
    return f"`{default}`"


def _meaning(param: Any) -> str:
    """The help text, and the range of a number as ``--help`` shows it."""
    text = _cell(param.help or "")
    # Typer has no public name for the range text (0<=x<=9).
    limits = getattr(param, "_get_number_range_help_str", lambda: "")()
    return f"{text} (`{limits}`)" if limits else text


def _table(params: list[Any], ctx: Any) -> list[str]:
    """One table row per parameter, grouped under the panels ``--help`` shows."""
    panels: dict[str | None, list[Any]] = {}
    for param in params:
        if param.name == "help":
            continue
        panels.setdefault(getattr(param, "rich_help_panel", None), []).append(param)
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for panel, members in sorted(panels.items(), key=lambda item: item[0] is not None):
        if panel is not None:
            lines.append(f"| **{panel}** | | |")
        for param in members:
            name = _name(param, ctx).replace("|", "\\|")
            lines.append(f"| `{name}` | {_default(param)} | {_meaning(param)} |")
    return lines


def reference(name: str) -> str:
    """The generated block of one command (``actviz``: the global options)."""
    (root, root_ctx), commands = _commands()
    if name == "actviz":
        command, ctx = root, root_ctx
        params = [p for p in root.get_params(root_ctx) if "completion" not in p.name]
    else:
        command, ctx = commands[name]
        params = command.get_params(ctx)
    usage = command.get_usage(ctx).removeprefix("Usage: ")
    usage = re.sub(r"\{(\w+)\}", lambda m: m[1].upper(), usage)  # Typer writes {model}
    usage = re.sub(r"\[([a-z_]+)\]", lambda m: f"[{m[1].upper()}]", usage)
    lines = ["```", usage, "```", "", *_table(params, ctx)]
    return "\n".join(lines) + "\n\n"


def regenerate(text: str) -> str:
    """``text`` (docs/cli.md) with every generated block written anew from the app.

    Raises:
        StaleDocs: A command has no block, or a block names no command.
    """
    _, commands = _commands()
    names = {match["name"] for match in _BLOCK.finditer(text)}
    missing = sorted(set(commands) - names)
    unknown = sorted(names - set(commands) - {"actviz"})
    if missing or unknown:
        problems = [f"no section for command {n!r}" for n in missing]
        problems += [f"a section for {n!r}, which is no command" for n in unknown]
        raise StaleDocs(
            f"docs/cli.md: {'; '.join(problems)}. Add or remove its "
            f"'<!-- generated: NAME -->' block, then run `{COMMAND}`"
        )
    return _BLOCK.sub(lambda m: m[1] + reference(m["name"]) + m[4], text)


def main(argv: list[str] | None = None) -> int:
    """Rewrite docs/cli.md, or with ``--check`` say whether it is current (exit 1 if not)."""
    args = sys.argv[1:] if argv is None else argv
    current = DOCS.read_text(encoding="utf-8")
    try:
        fresh = regenerate(current)
    except StaleDocs as exc:
        print(exc, file=sys.stderr)
        return 1
    if "--check" in args:
        if fresh != current:
            print(f"docs/cli.md is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if fresh != current:
        write_bytes(DOCS, fresh.encode("utf-8"))
        print(f"wrote {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
