"""Mistakes in a recipe or on the command line: one line naming the file or field and the fix, exit code 2,
no traceback, before TRL or a model is loaded (the checks of ``openclaw_trl.recipe_check``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openclaw_trl import recipe_check
from openclaw_trl.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "gradio", "peft", "huggingface_hub")
TOY = "recipes/toy_offline.yaml"
TABLE = recipe_check.current_table()
EXACT = TABLE is not None and TABLE.exact
"""The field table was made with the installed TRL, transformers and peft: every check is made before TRL
loads. With other versions, a name the table lacks is left to the run's parser (one line too, seconds later)."""

_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
import app
rc = app.main({argv!r})
print("\\n@@" + json.dumps({{"rc": rc, "heavy": sorted(m for m in {heavy!r} if m in sys.modules)}}))
"""


def run_app(*argv: str) -> tuple[int, str, list[str], float]:
    """``(exit code, stderr, heavy modules imported, seconds)`` of ``python app.py ARGV`` in a fresh
    interpreter."""
    code = _PROBE.format(root=str(ROOT), argv=list(argv), heavy=HEAVY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    elapsed = time.monotonic() - start
    _, _, report = proc.stdout.rpartition("\n@@")
    if not report:  # app.main raised: the traceback is the failure
        return proc.returncode, proc.stderr, [], elapsed
    result = json.loads(report)
    return result["rc"], proc.stderr, result["heavy"], elapsed


def assert_one_line(rc: int, err: str, heavy: list[str], elapsed: float) -> str:
    assert rc == 2, err
    assert "Traceback" not in err and "usage:" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    if EXACT or "unknown" not in lines[0]:
        assert not heavy, f"loaded {heavy} before refusing"  # no model, no TRL: the answer comes at once
        assert elapsed < 10, elapsed  # 0.1-0.8 s on 2 busy cores
    return lines[0]


def recipe_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / TOY).read_text()
    assert old in text
    path = tmp_path / "mine.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_a_missing_recipe_names_the_closest_ones():
    line = assert_one_line(*run_app("--config", "recipes/toy_ofline.yaml"))
    assert line.startswith("openclaw-trl train: error: recipe recipes/toy_ofline.yaml does not exist: "), line
    assert "did you mean recipes/toy_offline.yaml" in line and "ls recipes/" in line, line


def test_an_unknown_field_names_the_closest_one_in_the_recipe_and_on_the_command_line(tmp_path):
    recipe = recipe_with(tmp_path, "learning_rate: 3.0", "learnig_rate: 3.0")
    line = assert_one_line(*run_app("--config", str(recipe)))
    where = f" in {recipe}" if EXACT else " in the recipe"
    assert line.endswith(
        f"unknown field `learnig_rate`{where}: did you mean `learning_rate`? "
        "(openclaw-trl fields WORD lists the recipe fields)"
    ), line
    line = assert_one_line(*run_app("--config", TOY, "--learnig_rate", "1e-3"))
    if EXACT:
        assert "unknown option `--learnig_rate`: did you mean `--learning_rate`?" in line, line
    else:
        assert "unknown field `learnig_rate`: did you mean `learning_rate`?" in line, line


def test_a_value_of_the_wrong_type_says_what_the_field_takes(tmp_path):
    recipe = recipe_with(tmp_path, "batch_size: 2\n", "batch_size: two\n")
    line = assert_one_line(*run_app("--config", str(recipe)))
    assert line.endswith(f"`batch_size: two` in {recipe}: batch_size takes a whole number, e.g. 2"), line
    line = assert_one_line(*run_app("--config", TOY, "--batch_size", "two"))
    assert "`--batch_size two` on the command line: batch_size takes a whole number" in line, line
    line = assert_one_line(*run_app("--config", TOY, "--method", "ppo"))
    assert "method takes one of rl, opd, combine" in line, line


def test_a_taken_port_is_refused_before_the_model_loads():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = assert_one_line(*run_app("--config", TOY, "--port", str(port)))
    assert line.endswith(
        f"port {port} on 127.0.0.1 is in use (another server still running?): stop it, or choose another "
        "port with --port N"
    ), line
    assert "Errno" not in line


@pytest.mark.parametrize("recipe", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_every_recipe_passes(recipe):
    recipe_check.check_run_argv(["--config", str(recipe), "--port", "0"])


def test_the_command_line_forms_the_run_accepts_pass():
    recipe_check.check_run_argv(
        ["--config", str(ROOT / TOY), "--use_peft", "--no_use_peft", "--bf16", "false", "--batch-size=4"]
        + ["--lora_target_modules", "q_proj", "v_proj", "--opd_kd_schedule_steps", "0", "2", "--port", "0"]
        + ["--learning_rate", "-1e-3", "--share", "--json-summary", "--model_init_kwargs", '{"a": 1}']
    )
    with pytest.raises(UserError, match="--port needs a value"):
        recipe_check.check_run_argv(["--config", str(ROOT / TOY), "--port"])
    with pytest.raises(UserError, match="--port takes one value, got 2: 1 2"):
        recipe_check.check_run_argv(["--config", str(ROOT / TOY), "--port", "1", "2"])


def test_the_field_table_is_current():
    """``openclaw_trl/recipe_field_table.py`` is what ``python -m openclaw_trl.recipe_check`` writes for the
    config sources (run it after changing a field) and, with the TRL, transformers and peft it was made with,
    for those; with others, the fields it has are read the same way."""
    assert TABLE is not None, "the config changed: python -m openclaw_trl.recipe_check writes the table again"
    if EXACT:
        assert (ROOT / "openclaw_trl" / "recipe_field_table.py").read_text() == recipe_check.table_source()
        return
    import dataclasses

    from openclaw_trl.config import OpenClawConfig

    fields = recipe_check.build_table()[0]
    for field in dataclasses.fields(OpenClawConfig):
        if field.name in fields:
            assert TABLE.fields.get(field.name) == fields[field.name], field.name
    assert all(TABLE.fields[name] == field for name, field in fields.items() if name in TABLE.fields)


def test_with_other_library_versions_a_name_the_table_lacks_goes_to_the_parser(monkeypatch):
    monkeypatch.setattr(recipe_check, "installed_versions", lambda: {"trl": "0.0.0"})
    argv = ["--config", str(ROOT / TOY), "--port", "0", "--a_field_of_a_newer_trl", "1"]
    recipe_check.check_run_argv(argv)
    with pytest.raises(UserError, match="batch_size takes a whole number"):
        recipe_check.check_run_argv([*argv, "--batch_size", "two"])


def test_with_a_stale_table_the_runs_own_parser_answers_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe_check, "current_table", lambda: None)
    recipe_check.check_run_argv(["--config", str(ROOT / TOY), "--learnig_rate", "1", "--port", "0"])
    from openclaw_trl.recipe import load_recipe

    argv = ["--config", str(ROOT / TOY), "--output_dir", str(tmp_path)]
    with pytest.raises(UserError, match=r"invalid recipe: argument --batch_size/--batch-size: invalid int"):
        load_recipe([*argv, "--batch_size", "two"])
    with pytest.raises(UserError, match=r"^unknown field `learnig_rate`: did you mean `learning_rate`\?"):
        load_recipe([*argv, "--learnig_rate", "1"])
