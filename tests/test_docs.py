"""The docs say what the code does: the generated references match the app and the dataclasses, every `voxnerf`
command line in README.md and docs/ names real commands and options, and the short code blocks run.

A fenced block's info string says what it is (renderers show only the code):
  sh, python            short and self-contained: run, in order, in a fresh folder per page (a later block may use
                        what an earlier one made)
  sh example, python example, yaml
                        to adapt (your data, minutes of training): `voxnerf` lines are checked against the app,
                        `make` targets against the Makefile, Python is compiled and the voxnerf names it imports and
                        calls are checked against their signatures, YAML is checked as a configuration
  text                  not code (synopses, folder trees, diagrams)
Inline `voxnerf ...` spans in the prose are checked against the app too, and relative links against the files and
headings they point to.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import yaml
from test_architecture import BELOW

from voxnerf.cli.main import app, run
from voxnerf.cli.reference import anchor, pages
from voxnerf.errors import VoxnerfError
from voxnerf.run.config import check_override

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
KINDS = {("sh",), ("python",), ("sh", "example"), ("python", "example"), ("yaml",), ("text",)}
FENCE = "```"
INLINE = re.compile(r"`(voxnerf [^`]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+")


@dataclass
class Block:
    """A fenced code block: its page, the line its fence opens on, its info string's words, and its text."""

    page: Path
    line: int
    kind: tuple[str, ...]
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def language(self) -> str:
        return self.kind[0] if self.kind else ""

    @property
    def runs(self) -> bool:
        return self.kind in {("sh",), ("python",)}


def code_blocks(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, in order."""
    blocks, opened, lines = [], None, []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if not line.startswith(FENCE):
            lines.append(line)
        elif opened is None:
            opened, lines = (number, tuple(line[len(FENCE):].split())), []
        else:
            blocks.append(Block(page, opened[0], opened[1], "\n".join(lines) + "\n"))
            opened = None
    assert opened is None, f"{page.relative_to(ROOT)}:{opened[0]}: a code block is never closed"
    return blocks


def prose(page: Path) -> str:
    """A page without its fenced blocks."""
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)


def shell_lines(text: str) -> list[list[str]]:
    """The commands of a shell block as token lists (continuations joined, comments dropped)."""
    joined = text.replace("\\\n", " ")
    return [tokens for tokens in (shlex.split(line, comments=True) for line in joined.splitlines()) if tokens]


def voxnerf_arguments(tokens: list[str]) -> list[str] | None:
    """The arguments given to the voxnerf command in a command line (`voxnerf ...`, `python -m voxnerf ...`,
    `torchrun ... -m voxnerf ...`), or None when the line runs something else."""
    if tokens[0] == "voxnerf":
        return tokens[1:]
    for k in range(len(tokens) - 1):
        if tokens[k] == "-m" and tokens[k + 1] == "voxnerf":
            return tokens[k + 2:]
    return None


def find_command(args: list[str]) -> tuple[object, str, list[str]]:
    """The (sub)command `voxnerf ARGS` runs, its path ('voxnerf scene make') and the arguments left for it;
    LookupError naming a command that does not exist."""
    command, path = typer.main.get_command(app), "voxnerf"
    while hasattr(command, "commands") and args and not args[0].startswith("-"):
        if args[0] not in command.commands:
            raise LookupError(f"{path} has no command '{args[0]}' (it has: {', '.join(command.commands)})")
        command, path, args = command.commands[args[0]], f"{path} {args[0]}", args[1:]
    return command, path, args


def command_problem(args: list[str], all_arguments: bool) -> str | None:
    """What is wrong with `voxnerf ARGS` as the app parses it (without running it): an unknown command or
    option, a bad value, too many arguments, or, with `all_arguments`, a missing one; else None."""
    try:
        command, path, args = find_command(args)
    except LookupError as e:
        return str(e)
    if hasattr(command, "commands") and not all_arguments:
        return None
    try:
        command.make_context(path, list(args), resilient_parsing=not all_arguments)
    except typer.Exit:  # --help, --version
        return None
    except typer.TyperException as e:
        return f"{path}: {e.format_message()}"
    return None


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-zA-Z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))


def imported_names(tree: ast.Module) -> dict[str, object]:
    """The voxnerf objects and modules a snippet imports, by the name it binds them to."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("voxnerf"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    raise AssertionError(f"{node.module} has no '{alias.name}'")
                found[alias.asname or alias.name] = getattr(module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("voxnerf"):  # `import voxnerf.x` binds voxnerf; `... as y` binds y
                    module = importlib.import_module(alias.name)
                    found[alias.asname or "voxnerf"] = module if alias.asname else importlib.import_module("voxnerf")
    return found


def called_object(func: ast.expr, names: dict[str, object]):
    """The voxnerf object a call's function expression names (`train_run`, `toy_scenes.make_scene`), or None."""
    if isinstance(func, ast.Name):
        return names.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            inspect.ismodule(names.get(func.value.id)):
        module = names[func.value.id]
        if not hasattr(module, func.attr):
            raise AssertionError(f"{module.__name__} has no '{func.attr}'")
        return getattr(module, func.attr)
    return None


def python_problem(code: str) -> str | None:
    """What is wrong with a Python snippet: a syntax error, a voxnerf name that does not exist, or a call to a
    voxnerf function whose arguments its signature does not take; else None."""
    try:
        tree = ast.parse(code)
        names = imported_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args) or \
                    any(k.arg is None for k in node.keywords):
                continue
            target = called_object(node.func, names)
            if callable(target):
                inspect.signature(target).bind(*node.args, **{k.arg: k.value for k in node.keywords})
    except (SyntaxError, AssertionError, ImportError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def heading_anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them."""
    return {anchor(line.lstrip("#").strip()) for line in prose(page).splitlines() if line.startswith("#")}


def link_problem(page: Path, target: str) -> str | None:
    """What is wrong with a relative link from `page` (a missing file, or a heading the page does not have)."""
    if "://" in target:
        return None
    path, _, fragment = target.partition("#")
    linked = (page.parent / path).resolve() if path else page
    if not linked.exists():
        return f"{target}: no such file"
    if fragment and linked.suffix == ".md" and f"#{fragment}" not in heading_anchors(linked):
        return f"{target}: {linked.name} has no heading with that anchor"
    return None


def link_problems(pages: list[Path]) -> list[str]:
    """What is wrong with each relative link of `pages`, named by page."""
    return [f"{page.relative_to(ROOT)}: {why}" for page in pages for target in LINK.findall(prose(page))
            for why in [link_problem(page, target)] if why]


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in code_blocks(page)]


# ---- the generated pages -----------------------------------------------------------------------------------------
def test_generated_reference_matches_the_app_and_the_config_dataclasses():
    stale = [name for name, text in pages().items()
             if not (ROOT / "docs" / name).is_file() or (ROOT / "docs" / name).read_text() != text]
    assert not stale, f"docs/{', docs/'.join(stale)} differ from the code: run make docs " \
                      f"(python -m voxnerf.cli.reference docs/) and commit the result"


# ---- every block and command line --------------------------------------------------------------------------------
def test_every_code_block_says_what_it_is():
    unlabeled = [f"{b.where}: ```{' '.join(b.kind)}" for b in all_blocks() if b.kind not in KINDS]
    assert not unlabeled, "code blocks need one of the info strings " \
                          f"{sorted(' '.join(k) for k in KINDS)}:\n" + "\n".join(unlabeled)


def test_every_voxnerf_command_line_names_real_commands_and_options():
    problems = []
    for block in all_blocks():
        if block.language == "sh":
            lines = [voxnerf_arguments(tokens) for tokens in shell_lines(block.text)]
            problems += [f"{block.where}: {why}" for args in lines if args is not None
                         for why in [command_problem(args, all_arguments=True)] if why]
    for page in PAGES:
        spans = [shlex.split(span, comments=True)[1:] for span in INLINE.findall(prose(page))]
        problems += [f"{page.relative_to(ROOT)}: `voxnerf {' '.join(args)}`: {why}" for args in spans
                     for why in [command_problem(args, all_arguments=False)] if why]
    assert not problems, "\n".join(problems)


def test_every_relative_link_points_to_a_file_and_heading_that_exist():
    problems = link_problems(PAGES)
    assert not problems, "\n".join(problems)


def test_every_relative_link_of_the_benchmark_report_and_its_log_points_to_a_file_and_heading_that_exist():
    problems = link_problems([ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "benchmarks" / "log").glob("*.md"))])
    assert not problems, "\n".join(problems)


def test_the_generated_reference_and_the_presets_cite_no_issue_number():
    """The project's history (issue numbers) lives in benchmarks/; a user's pages and presets say what a value does."""
    files = [ROOT / "docs" / "config.md", ROOT / "docs" / "commands.md", *sorted((ROOT / "configs").glob("*.yaml"))]
    found = [f"{path.relative_to(ROOT)}:{row}: {line.strip()}" for path in files
             for row, line in enumerate(path.read_text().splitlines(), start=1) if ISSUE_NUMBER.search(line)]
    assert not found, "\n".join(found)


def test_every_make_target_in_the_docs_is_in_the_makefile():
    targets = makefile_targets()
    missing = [f"{b.where}: make {tokens[1]}" for b in all_blocks() if b.language == "sh"
               for tokens in shell_lines(b.text) if tokens[0] == "make" and tokens[1] not in targets]
    assert not missing, "\n".join(missing)


def test_every_python_example_imports_and_calls_what_exists():
    problems = [f"{b.where}: {why}" for b in all_blocks() if b.language == "python"
                for why in [python_problem(b.text)] if why]
    assert not problems, "\n".join(problems)


def test_every_yaml_block_is_a_valid_configuration():
    problems = []
    for block in all_blocks():
        if block.kind == ("yaml",):
            try:
                check_override(yaml.safe_load(block.text), "yaml")
            except (yaml.YAMLError, VoxnerfError) as e:
                problems.append(f"{block.where}: {e}")
    assert not problems, "\n".join(problems)


def test_the_architecture_table_states_the_import_rules_of_tests_test_architecture():
    rows = re.findall(r"^\| `(\w+)(?:/|\.py)` \|.*\| ([^|]*) \|$", (ROOT / "docs" / "architecture.md").read_text(),
                      flags=re.MULTILINE)
    stated = {stage: {s.strip() for s in imports.split(",")} - {"nothing", ""} for stage, imports in rows}
    rules = {stage: set(below) for stage, below in BELOW.items()}
    wrong = [f"{stage}: the table says {sorted(stated.get(stage, {'(no row)'}))}, the rule says "
             f"{sorted(rules.get(stage, set()))}"
             for stage in sorted(set(stated) | set(rules)) if stated.get(stage) != rules.get(stage)]
    assert not wrong, "docs/architecture.md's table disagrees with tests/test_architecture.py:\n" + "\n".join(wrong)


# ---- the short blocks run ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.runs for b in code_blocks(p))],
                         ids=lambda p: p.name)
def test_short_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for block in code_blocks(page):
        if block.kind == ("sh",):
            for tokens in shell_lines(block.text):
                args = voxnerf_arguments(tokens)
                assert args is not None, f"{block.where}: a block that runs holds only voxnerf lines: {tokens}"
                assert run(args) == 0, f"{block.where}: voxnerf {' '.join(args)} failed"
        elif block.kind == ("python",):
            exec(compile(block.text, block.where, "exec"), namespace)
