"""docs/cli.md is the command-line app written out: it must match the app, command for command
and option for option, and the anchors other documents link to must exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from actviz.cli.docs import COMMAND, DOCS, StaleDocs, reference, regenerate

ROOT = Path(__file__).resolve().parents[1]


def test_docs_cli_md_is_current() -> None:
    text = DOCS.read_text(encoding="utf-8")
    try:
        fresh = regenerate(text)
    except StaleDocs as exc:
        pytest.fail(str(exc))
    assert fresh == text, f"docs/cli.md is stale: run `{COMMAND}` and commit the result"


def test_a_command_without_a_section_is_named() -> None:
    text = DOCS.read_text(encoding="utf-8")
    without = re.sub(
        r"<!-- generated: optimize -->.*?<!-- end generated: optimize -->", "", text, flags=re.S
    )
    with pytest.raises(StaleDocs, match=r"no section for command 'optimize'.*actviz\.cli\.docs"):
        regenerate(without)
    extra = text + "\n<!-- generated: gone -->\n<!-- end generated: gone -->\n"
    with pytest.raises(StaleDocs, match="'gone', which is no command"):
        regenerate(extra)


def test_a_changed_option_makes_the_file_stale() -> None:
    text = DOCS.read_text(encoding="utf-8")
    edited = text.replace("| `--pca-mask` |", "| `--pca-masks` |", 1)
    assert edited != text
    assert regenerate(edited) == text


def test_the_reference_has_every_option() -> None:
    run = reference("run")
    for option in ("--view pca", "--pca-mask", "-c, --channels, --max-channels N", "--capture"):
        assert f"`{option}" in run
    assert "| `-o, --out PATH` |  | Output folder. [default: actviz-out, or the first free" in run
    assert "when it holds an earlier optimize's results and --overwrite" in reference("optimize")
    assert "`--source TEXT` | `torchvision`" in reference("models")
    assert "`--steps N` | `512` | Adam steps per image. (`x>=1`)" in reference("optimize")
    assert reference("report").startswith("```\nactviz report [OPTIONS] LOGDIR\n```")
    assert "-h, --help" not in run  # said once, under the global options
    # Markdown would take these for a tag and emphasis.
    assert r"\<NN>\_\<layer>\_pca.png" in run


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_links_into_docs_cli_md_resolve() -> None:
    anchors = _anchors(DOCS.read_text(encoding="utf-8"))
    assert "actviz-run-model-input-options" in anchors
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    links = [
        (page.name, anchor)
        for page in pages
        for anchor in re.findall(r"cli\.md#([\w-]+)", page.read_text(encoding="utf-8"))
    ]
    assert links
    broken = [(page, anchor) for page, anchor in links if anchor not in anchors]
    assert not broken, f"links to anchors docs/cli.md no longer has: {broken}"


def test_every_bracketed_default_reaches_the_terminal_help() -> None:
    """Rich reads ``[default: ...]`` in a help text as a markup tag and drops it unless it is
    escaped: each option's help, as the terminal shows it, keeps its bracketed text."""
    import typer
    from typer.testing import CliRunner

    from actviz.cli import app

    runner = CliRunner()
    command = typer.main.get_command(app)
    checked = 0
    for name, sub in command.commands.items():  # type: ignore[attr-defined]
        shown = runner.invoke(app, [name, "--help"], env={"COLUMNS": "2000"}).output
        shown = re.sub(r"\s+", " ", shown.replace("│", " "))
        for param in sub.params:
            help_text = getattr(param, "help", None) or ""
            for bracket in re.findall(r"\\?\[default: [^\]]*\]", help_text):
                assert bracket.lstrip("\\") in shown, f"{name} {param.name}: {bracket} is lost"
                checked += 1
    assert checked >= 8  # run, top-images, diff, sae, cam-eval and report have some


def test_each_help_paragraph_is_one_line_for_the_terminal_to_wrap() -> None:
    """Rich keeps a docstring's line breaks: a paragraph broken where the source broke it
    splits sentences in an 80-column terminal. Each paragraph reaches the terminal whole."""
    import inspect

    from typer.testing import CliRunner

    from actviz.cli import app

    runner = CliRunner()
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or info.callback.__name__.replace("_", "-")
        shown = runner.invoke(app, [name, "--help"], env={"COLUMNS": "2000"}).output
        lines = {line.strip() for line in shown.splitlines()}
        for paragraph in (inspect.getdoc(info.callback) or "").split("\n\n"):
            assert " ".join(paragraph.split()) in lines, f"{name}: {paragraph[:60]!r} is broken"
