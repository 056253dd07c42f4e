"""``--help`` of app.py and of every ``openclaw-trl`` command: it answers without loading a model or TRL,
lists ``--config`` first, shows the recipe fields by group and no recipe's values; the fields page is current.

Each help runs in a fresh interpreter, which then reports the heavy modules it imported (none may be).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openclaw_trl.cli import COMMANDS
from openclaw_trl.commands import fields

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "gradio", "vllm", "peft", "huggingface_hub", "datasets", "yaml")
RECIPE_COMMANDS = (["python", "app.py"], ["train"], ["serve"])

_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
argv = {argv!r}
try:
    if argv[:2] == ["python", "app.py"]:
        import app
        rc = app.main(argv[2:])
    else:
        from openclaw_trl.cli import main
        rc = main(argv)
except SystemExit as exc:
    rc = exc.code
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("\\n@@" + json.dumps({{"rc": rc, "heavy": heavy}}))
"""


def run_help(argv: list[str]) -> tuple[int, str, list[str]]:
    """``(exit code, output, heavy modules imported)`` of ``argv`` in a fresh interpreter."""
    code = _PROBE.format(root=str(ROOT), argv=argv, heavy=HEAVY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    out, _, report = proc.stdout.rpartition("\n@@")
    assert report, proc.stderr
    result = json.loads(report)
    return result["rc"] or 0, out + proc.stderr, result["heavy"]


def option_lines(text: str) -> list[str]:
    """The options of a help text, in order (``-h, --help`` left out)."""
    names = []
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  -") and not stripped.startswith("-h"):
            names.append(stripped.split()[0].rstrip(","))
    return names


ALL_HELPS = [[], *[[name] for name in COMMANDS], ["python", "app.py"]]


@pytest.mark.parametrize("argv", ALL_HELPS, ids=lambda a: " ".join(a) or "openclaw-trl")
def test_help_answers_without_heavy_imports(argv):
    for flag in ("--help", "-h"):
        rc, out, heavy = run_help([*argv, flag])
        assert rc == 0, out
        assert heavy == [], f"{argv} {flag} imported {heavy}"
        assert "usage:" in out and "``" not in out
        assert "Traceback" not in out and "(offline?)" not in out  # no model probe


@pytest.mark.parametrize("argv", RECIPE_COMMANDS, ids=lambda a: " ".join(a))
def test_recipe_commands_list_config_first_and_the_field_groups(argv):
    rc, out, _ = run_help([*argv, "--help"])
    assert rc == 0
    assert option_lines(out)[0] == "--config", out
    if argv != ["serve"]:
        for group in fields.parse_groups()[1]:
            if group.entries:
                assert f"{group.short_title}: {group.entries[0].names[0]}" in out
        assert "(default:" not in out  # neither TRL's list nor any recipe's values


def test_help_with_a_recipe_shows_no_recipe_values():
    _, plain, _ = run_help(["train", "--help"])
    rc, with_recipe, heavy = run_help(
        ["train", "--config", "recipes/toy_offline.yaml", "--learning_rate", "1", "-h"]
    )
    assert rc == 0 and heavy == []
    assert with_recipe == plain


def test_help_fields_prints_every_documented_field_plainly():
    rc, out, heavy = run_help(["python", "app.py", "--help-fields"])
    assert rc == 0 and heavy == []
    assert "`" not in out
    for name in fields.documented_fields():
        assert name in out
    assert "batch_size (int, defaults to 16)" in out


def test_fields_command_filters_and_refuses_unknown_words():
    rc, out, _ = run_help(["fields", "judge_m"])
    assert rc == 0 and "judge_m (int, defaults to 1)" in out and "prefix_cache_mb" not in out
    rc, out, _ = run_help(["fields", "no_such_field"])
    assert rc == 2 and "no recipe field or group name contains no_such_field" in out


def test_help_trl_lists_trls_fields_with_the_dataclass_defaults(capsys):
    from openclaw_trl.commands.train import run_argv

    assert run_argv(["--config", "recipes/toy_offline.yaml", "--help-trl"], prog="python app.py") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python app.py")
    assert "Judged samples consumed per update. (default: 16)" in out  # toy_offline.yaml says 2


def test_docstring_documents_every_field_and_names_only_real_ones():
    from trl import ModelConfig

    from openclaw_trl.config import OpenClawConfig

    tree = ast.parse(fields.CONFIG_SOURCE.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "OpenClawConfig")
    declared = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
    documented = fields.documented_fields()
    assert [name for name in declared if name not in documented] == []
    real = set(OpenClawConfig.__dataclass_fields__)
    assert [name for name in [*documented, *fields.TRL_TRAINING_FIELDS] if name not in real] == []
    assert [n for n in fields.TRL_MODEL_FIELDS if n not in ModelConfig.__dataclass_fields__] == []


def test_recipe_fields_page_is_current():
    page = (ROOT / "docs" / "recipe-fields.md").read_text()
    assert page == fields.fields_markdown() + "\n", (
        "docs/recipe-fields.md is out of date: openclaw-trl fields --markdown > docs/recipe-fields.md"
    )


def test_serve_overrides_help_lists_the_recipe_fields_not_trls():
    rc, out, heavy = run_help(["serve", "--config", "recipes/toy_offline.yaml", "--", "--help"])
    assert rc == 0 and heavy == []
    assert out.startswith("Recipe fields, by group") and "(default:" not in out
    rc, out, heavy = run_help(["serve", "--", "--help-fields"])
    assert rc == 0 and heavy == [] and "batch_size (int, defaults to 16)" in out
