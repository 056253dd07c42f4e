"""``openclaw-trl fields [WORD ...]``: every recipe field with its type, default and meaning.

The list is read from the ``OpenClawConfig`` docstring (the one place fields are documented), parsed from the
source of ``openclaw_trl/config.py`` with :mod:`ast` instead of importing it, so that ``--help`` and this
command answer at once, without loading TRL or torch. The docstring's layout: ``> Title`` lines open a group;
inside a group, an entry is a header at column 0 (``name (`type`, defaults to `value`):``, several names
separated by commas, possibly over several lines) followed by its indented description; other column-0
paragraphs are prose about the group.

``docs/recipe-fields.md`` is ``openclaw-trl fields --markdown``; a test checks the committed page is current.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from openclaw_trl.errors import UserError

CONFIG_SOURCE = Path(__file__).resolve().parents[1] / "config.py"

# Fields of TRL's dataclasses that recipes set most; every other field of GRPOConfig / TrainingArguments /
# ModelConfig works too (``--help-trl`` lists them all).
TRL_MODEL_FIELDS = (
    "model_name_or_path",
    "dtype",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "load_in_4bit",
)
TRL_TRAINING_FIELDS = (
    "output_dir",
    "max_steps",
    "temperature",
    "num_iterations",
    "seed",
    "save_strategy",
    "max_grad_norm",
    "weight_decay",
)

_HEADER_START = re.compile(r"^[a-z_][a-z0-9_]*(?: \(|,)")
_NAME = re.compile(r"^\s*([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class FieldEntry:
    """One documented entry: the fields it names, its header and its description (one paragraph per item)."""

    names: tuple[str, ...]
    header: str
    text: tuple[str, ...]


@dataclass(frozen=True)
class FieldGroup:
    """A ``> Title`` section: its entries and its prose paragraphs, in the docstring's order."""

    title: str
    items: tuple[FieldEntry | str, ...]

    @property
    def entries(self) -> list[FieldEntry]:
        return [item for item in self.items if isinstance(item, FieldEntry)]

    @property
    def short_title(self) -> str:
        """``Parameters that control the judges`` -> ``the judges``."""
        for prefix in ("Parameters that control ", "Parameters that "):
            if self.title.startswith(prefix):
                return self.title[len(prefix) :]
        return self.title


@cache
def config_docstring() -> str:
    """The ``OpenClawConfig`` docstring, read from the source without importing the module."""
    tree = ast.parse(CONFIG_SOURCE.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "OpenClawConfig":
            return ast.get_docstring(node) or ""
    raise LookupError(f"no OpenClawConfig class in {CONFIG_SOURCE}")


def split_header(header: str) -> tuple[str, ...]:
    """Field names of an entry header: the leading name of each comma-separated part outside parentheses."""
    parts, depth, current, in_code = [], 0, "", False
    for char in header:
        in_code ^= char == "`"
        depth += (char == "(") - (char == ")") if not in_code else 0
        if char == "," and depth == 0 and not in_code:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return tuple(m.group(1) for part in parts if (m := _NAME.match(part)))


@cache
def parse_groups() -> tuple[tuple[str, ...], tuple[FieldGroup, ...]]:
    """``(intro paragraphs, groups)`` of the ``OpenClawConfig`` docstring."""
    intro: list[str] = []
    groups: list[tuple[str, list]] = []
    header: list[str] = []  # an entry header still being read (it ends with ":")
    paragraph: list[str] = []  # the prose or description paragraph being read
    entry: dict | None = None  # the entry whose description is being read

    def items() -> list:
        return groups[-1][1] if groups else intro

    def end_paragraph() -> None:
        if paragraph:
            text = " ".join(paragraph)
            (entry["text"] if entry is not None else items()).append(text)
            paragraph.clear()

    def end_entry() -> None:
        nonlocal entry
        end_paragraph()
        if entry is not None:
            items().append(FieldEntry(split_header(entry["header"]), entry["header"], tuple(entry["text"])))
            entry = None

    for line in config_docstring().splitlines():
        stripped = line.strip()
        if not stripped:
            end_paragraph()
        elif line.startswith("> "):
            end_entry()
            groups.append((stripped[2:], []))
        elif header or (not line.startswith(" ") and _HEADER_START.match(line)):
            if not header:
                end_entry()
            header.append(stripped)
            if stripped.endswith(":"):
                entry = {"header": " ".join(header)[:-1], "text": []}
                header.clear()
        elif line.startswith(" ") and entry is not None:
            paragraph.append(stripped)
        else:
            if entry is not None:
                end_entry()
            paragraph.append(stripped)
    end_entry()
    end_paragraph()
    return tuple(intro), tuple(FieldGroup(title, tuple(group_items)) for title, group_items in groups)


def documented_fields() -> list[str]:
    """Every field name the docstring documents, in its order."""
    return [name for group in parse_groups()[1] for entry in group.entries for name in entry.names]


# ---------------------------------------------------------------------------------------------- plain text
def plain(text: str) -> str:
    """Terminal text: no backticks, links as ``name (url)``."""
    text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1 (\2)", text)
    return text.replace("`", "")


def text_width() -> int:
    return max(60, min(110, shutil.get_terminal_size((100, 24)).columns) - 2)


def wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    """``textwrap.wrap`` that never breaks a name such as ``openclaw-trl`` at its hyphen."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=initial_indent,
        subsequent_indent=subsequent_indent,
        break_on_hyphens=False,
    )


def group_summary(width: int | None = None) -> str:
    """One short block per group: its fields' names (the brief list of ``--help``)."""
    width = width or text_width()
    lines = []
    rows = [(group.short_title, [n for e in group.entries for n in e.names]) for group in parse_groups()[1]]
    rows += [
        ("the model and its adapter (TRL's ModelConfig)", [*TRL_MODEL_FIELDS, "..."]),
        ("training (TRL's GRPOConfig / TrainingArguments)", [*TRL_TRAINING_FIELDS, "..."]),
    ]
    for title, names in rows:
        if not names:
            continue
        lines += wrap(f"{title}: " + ", ".join(names), width, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def fields_text(words: list[str] | None = None, width: int | None = None) -> str:
    """Every group with its entries in full (plain text); with ``words``, only the entries (or whole groups)
    whose names or title contain one of them."""
    width = width or text_width()
    words = [w.lower() for w in words or []]
    out = []
    for group in parse_groups()[1]:
        whole = not words or any(w in group.title.lower() for w in words)
        shown = [
            item
            for item in group.items
            if whole or (isinstance(item, FieldEntry) and any(w in n for w in words for n in item.names))
        ]
        if not shown:
            continue
        out += ["", group.title, ""]
        for item in shown:
            if isinstance(item, str):
                out += wrap(plain(item), width, initial_indent="  ", subsequent_indent="  ") + [""]
                continue
            out += wrap(plain(item.header), width, initial_indent="  ", subsequent_indent="    ")
            for text in item.text:
                out += wrap(plain(text), width, initial_indent="      ", subsequent_indent="      ")
            out.append("")
    if not out:
        raise UserError(
            f"no recipe field or group name contains {' or '.join(words)}: 'openclaw-trl fields' lists them all"
        )
    out += wrap(trl_fields_note(), width)
    return "\n".join(out).strip("\n")


def trl_fields_note() -> str:
    return (
        "Every field of TRL's GRPOConfig / TrainingArguments (" + ", ".join(TRL_TRAINING_FIELDS) + ", ...) "
        "and ModelConfig (" + ", ".join(TRL_MODEL_FIELDS) + ", ...) is a recipe field too: "
        "openclaw-trl train --help-trl lists them with TRL's defaults."
    )


# ---------------------------------------------------------------------------------------------- markdown
def fields_markdown() -> str:
    """``docs/recipe-fields.md``: the whole docstring as a Markdown page."""
    intro, groups = parse_groups()
    out = [
        "# Recipe fields",
        "",
        "<!-- Generated from the OpenClawConfig docstring by `openclaw-trl fields --markdown`; do not edit. -->",
        "",
        "A recipe is a YAML file of these fields (`python app.py --config recipes/x.yaml`, "
        "`openclaw-trl train --config ...`); any field can also be set on the command line, where it "
        "overrides the recipe: `--learning_rate 1e-5`. The defaults below are the fields' own; "
        "a recipe usually sets many of them. `openclaw-trl fields WORD` prints the fields whose name contains "
        "WORD.",
        "",
        intro[0].replace("``", "`") if intro else "",
        "",
        "## Contents",
        "",
        *[f"- [{group.title}](#{_anchor(group.title)})" for group in groups],
        "- [TRL's fields](#trls-fields)",
        "",
    ]
    for group in groups:
        out += [f"## {group.title}", ""]
        for item in group.items:
            if isinstance(item, str):
                out += [item, ""]
            else:
                out += [f"- **{item.header}**", ""] + [
                    line for text in item.text for line in (f"  {text}", "")
                ]
    out += [
        "## TRL's fields",
        "",
        trl_fields_note().replace("openclaw-trl train --help-trl", "`openclaw-trl train --help-trl`"),
        "",
    ]
    return "\n".join(out)


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


# ----------------------------------------------------------------------------------------------- command
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "words", nargs="*", metavar="WORD", help="only the fields (or groups) whose name contains WORD"
    )
    parser.add_argument("--markdown", action="store_true", help="print the docs/recipe-fields.md page")


def run(args: argparse.Namespace) -> int:
    print(fields_markdown() if args.markdown else fields_text(args.words))
    return 0
