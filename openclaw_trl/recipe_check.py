"""A recipe run's command line checked in a moment, before TRL, torch or a model is loaded.

:func:`check_run_argv` refuses, with one line that names the file or field and the fix (a
:class:`~openclaw_trl.errors.UserError`): a ``--config`` file that does not exist (with the closest recipe
names), a recipe that is not a YAML mapping, a field the recipe or the command line names that no
dataclass has (with the closest field name), a value of the wrong type (``batch_size: two``), and, for a
run that serves (``source: live``), a ``host:port`` that another program holds.

The names and types of the fields come from :mod:`openclaw_trl.recipe_field_table`, generated from the
parser the run uses (``python -m openclaw_trl.recipe_check`` writes it again). The table records a digest of
the config sources it was made from (when they changed since, only the file and port checks are made here)
and the TRL, transformers and peft versions: when the installed ones differ, a name the table lacks may be a
field those versions added, so it is left to the run's own parser, whose error is one line too
(``openclaw_trl.recipe``), a few seconds later.
"""

from __future__ import annotations

import difflib
import hashlib
import socket
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from openclaw_trl.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_SOURCES = ("config.py", "config_checks.py", "config_trl.py")
VERSIONED = ("trl", "transformers", "peft")
COMMAND_FLAGS = frozenset({"share", "json-summary", "json_summary"})
"""Options of the recipe commands themselves (not recipe fields): they take no value."""
PORT_FIELDS = ("source", "host", "port")
_TRUE = ("yes", "true", "t", "y", "1")
_FALSE = ("no", "false", "f", "n", "0")
FIELDS_HINT = "openclaw-trl fields WORD lists the recipe fields"


@dataclass(frozen=True)
class Field:
    """A recipe field as the run's parser reads it: ``kind`` is ``int``, ``float``, ``bool``, ``str`` or
    ``choice`` (one of ``choices``); ``many``: a list; ``optional_value``: a flag that may go without
    a value (``--use_peft`` means true)."""

    name: str
    kind: str
    choices: tuple[str, ...] = ()
    many: bool = False
    optional_value: bool = False


# ------------------------------------------------------------------------------------------------ the table
def config_digest() -> str:
    """A digest of the config sources the fields are declared in (the table is current when it matches)."""
    digest = hashlib.sha256()
    for name in CONFIG_SOURCES:
        digest.update((PACKAGE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def installed_versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = ""
    return out


def build_table() -> tuple[dict[str, Field], dict[str, str], dict[str, object]]:
    """``(fields by name, option name -> field name, the defaults the port check needs)`` from the parser
    the run uses (this imports TRL)."""
    from trl import ModelConfig, TrlParser

    from openclaw_trl.config import OpenClawConfig

    parser = TrlParser((OpenClawConfig, ModelConfig))
    fields: dict[str, Field] = {}
    options: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help", "config"):
            continue
        for option in action.option_strings:
            options[option.lstrip("-")] = action.dest
        if action.nargs == 0:  # --no_FIELD: the field itself has its own action
            continue
        if action.choices is not None:
            kind, choices = "choice", tuple(str(getattr(c, "value", c)) for c in action.choices)
        else:
            kind = {int: "int", float: "float"}.get(action.type, "str")
            kind = "bool" if getattr(action.type, "__name__", "") == "string_to_bool" else kind
            choices = ()
        fields[action.dest] = Field(
            action.dest, kind, choices, many=action.nargs in ("+", "*"), optional_value=action.nargs == "?"
        )
    defaults = {a.dest: a.default for a in parser._actions if a.dest in PORT_FIELDS and a.nargs != 0}
    return fields, options, defaults


def encode(field: Field) -> str:
    """``name=kind`` (``kind(a|b)`` for choices), ``+`` for a list, ``?`` for a flag that may go without a value."""
    kind = f"choice({'|'.join(field.choices)})" if field.kind == "choice" else field.kind
    return f"{field.name}={kind}{'+' if field.many else ''}{'?' if field.optional_value else ''}"


def decode(token: str) -> Field:
    name, _, kind = token.partition("=")
    optional_value, kind = kind.endswith("?"), kind.rstrip("?")
    many, kind = kind.endswith("+"), kind.rstrip("+")
    choices: tuple[str, ...] = ()
    if kind.startswith("choice("):
        kind, choices = "choice", tuple(kind[len("choice(") : -1].split("|"))
    return Field(name, kind, choices, many, optional_value)


def table_source() -> str:
    """The text of :mod:`openclaw_trl.recipe_field_table` for the installed libraries and config sources."""
    import textwrap

    fields, options, defaults = build_table()
    odd = {o: d for o, d in options.items() if resolve_option(o, fields) != d}
    if odd:
        raise ValueError(f"options that are not --FIELD, --FIELD-WITH-HYPHENS or --no_FIELD: {odd}")
    tokens = " ".join(encode(field) for _, field in sorted(fields.items()))
    body = textwrap.wrap(tokens, 100, break_long_words=False, break_on_hyphens=False)
    return "\n".join(
        [
            '"""Every recipe field of a run with its type, for the checks made before TRL is loaded',
            "(``openclaw_trl.recipe_check``): ``name=kind``, ``+`` a list, ``?`` a flag that may go without a",
            "value. Generated by ``python -m openclaw_trl.recipe_check``; do not edit.",
            '"""',
            "",
            f"VERSIONS = {installed_versions()!r}".replace("'", '"'),
            f'CONFIG_DIGEST = "{config_digest()}"',
            f"DEFAULTS = {dict(sorted(defaults.items()))!r}".replace("'", '"'),
            'FIELDS = """',
            *body,
            '"""',
            "",
        ]
    )


def resolve_option(option: str, fields) -> str | None:
    """The field an option sets: ``--FIELD`` or ``--FIELD-WITH-HYPHENS``, and ``--no_FIELD`` for a flag
    (None: no such field)."""
    name = option.replace("-", "_")
    if name in fields:
        return name
    if name.startswith("no_") and name[3:] in fields:
        return name[3:]
    return None


@dataclass(frozen=True)
class FieldTable:
    """The fields by name, the defaults of ``source``, ``host`` and ``port``, and whether the table was made
    with the installed TRL, transformers and peft (``exact``: a name it lacks is no field)."""

    fields: dict[str, Field]
    defaults: dict[str, object]
    exact: bool


def current_table() -> FieldTable | None:
    """The generated table when it matches the config sources, else None."""
    try:
        from openclaw_trl import recipe_field_table as table
    except ImportError:
        return None
    if table.CONFIG_DIGEST != config_digest():
        return None
    fields = {field.name: field for field in map(decode, table.FIELDS.split())}
    return FieldTable(fields, table.DEFAULTS, exact=table.VERSIONS == installed_versions())


# ------------------------------------------------------------------------------------------------ the checks
def check_run_argv(argv: list[str], recipes_dir: Path | None = None) -> None:
    """Raise a one-line :class:`UserError` for the mistakes of the module docstring in ``argv`` (``--config
    RECIPE`` and ``--FIELD VALUE`` options); nothing is imported but PyYAML."""
    recipe_path, recipe = None, {}
    if "--config" in argv:
        at = argv.index("--config")
        if at + 1 >= len(argv) or argv[at + 1].startswith("--"):
            raise UserError("--config needs a recipe file: --config recipes/toy_offline.yaml (ls recipes/)")
        recipe_path = Path(argv[at + 1])
        recipe = read_recipe(recipe_path, recipes_dir)
    table = current_table()
    overrides = command_line_values(argv, table)
    if table is not None:
        for name, value in recipe.items():
            if name == "env":
                continue
            field = table.fields.get(name)
            if field is None and not table.exact:
                continue  # perhaps a field of the installed libraries: the run's parser decides
            if field is None:
                raise UserError(
                    f"unknown field `{name}` in {recipe_path}: {suggestion(name, table.fields, '')}"
                )
            check_value(field, value, f"in {recipe_path}")
        for name, values in overrides.items():
            check_values(table.fields[name], values)
    check_port(recipe, overrides, table)


def read_recipe(path: Path, recipes_dir: Path | None = None) -> dict:
    """The recipe's mapping; a missing file names the closest recipes, a broken one the line at fault."""
    import yaml

    if not path.is_file():
        folder = path.parent if path.parent.is_dir() else (recipes_dir or Path("recipes"))
        names = sorted(p.name for p in folder.glob("*.yaml")) if folder.is_dir() else []
        close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(str(folder / n) for n in close)}? " if close else ""
        raise UserError(f"recipe {path} does not exist: {hint}(ls {folder}/ lists the recipes)")
    try:
        recipe = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"recipe {path} is not valid YAML{where}: {problem}") from None
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise UserError(
            f"recipe {path} must be a mapping of fields (`name: value` lines), not a list or text"
        )
    return recipe


def command_line_values(argv: list[str], table) -> dict[str, list[str]]:
    """``{field: [values]}`` of the ``--FIELD VALUE`` options (``--config`` and the commands' own flags left
    out); an unknown option is refused with the closest name when the table is current."""
    values: dict[str, list[str]] = {}
    current: str | None = None
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            name, equal, value = token[2:].partition("=")
            current = None
            if name == "config" or name in COMMAND_FLAGS:
                continue
            if table is None:
                continue
            dest = resolve_option(name, table.fields)
            if dest is None and not table.exact:
                continue  # perhaps a field of the installed libraries: the run's parser decides
            if dest is None:
                known = name.replace("-", "_")
                raise UserError(f"unknown option `--{name}`: {suggestion(known, table.fields, '--')}")
            if dest != name.replace("-", "_"):
                continue  # --no_FIELD takes no value
            current = dest
            values[dest] = [value] if equal else []
        elif current is not None:
            values[current].append(token)
    return values


def suggestion(name: str, known, prefix: str) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean `{prefix}{close[0]}`? ({FIELDS_HINT})"
    return f"no recipe field has this name ({FIELDS_HINT})"


def check_values(field: Field, values: list[str]) -> None:
    option = f"--{field.name}"
    if not values and not field.optional_value:
        raise UserError(f"{option} needs a value ({describe(field)})")
    if len(values) > 1 and not field.many:
        raise UserError(f"{option} takes one value, got {len(values)}: {' '.join(values)}")
    for value in values:
        if not fits(field, value):
            raise UserError(f"`{option} {value}` on the command line: {describe(field)}")


def check_value(field: Field, value, where: str) -> None:
    """Refuse ``value`` when the run's parser would: it names the field, the value and the expected type."""
    if value is None:
        return
    if isinstance(value, list):
        if not field.many:
            raise UserError(f"`{field.name}` {where} takes one value, not a list ({describe(field)})")
        for item in value:
            check_value(Field(field.name, field.kind, field.choices), item, where)
        return
    if isinstance(value, dict) or field.kind == "str":
        return
    if not fits(field, value):
        raise UserError(f"`{field.name}: {value}` {where}: {describe(field)}")


def fits(field: Field, value) -> bool:
    if field.kind == "str":
        return True
    text = str(value).strip()
    if field.kind == "bool":
        return isinstance(value, bool) or text.lower() in (*_TRUE, *_FALSE)
    if field.kind == "choice":
        return text in field.choices
    if isinstance(value, bool):
        return False
    try:
        number = float(text) if field.kind == "float" else int(text)
    except ValueError:
        return False
    return not (field.kind == "int" and isinstance(value, float) and number != value)


def describe(field: Field) -> str:
    expected = {
        "int": "a whole number, e.g. 2",
        "float": "a number, e.g. 0.001",
        "bool": "true or false",
        "choice": "one of " + ", ".join(field.choices),
    }.get(field.kind, "a text")
    return f"{field.name} takes {expected}" + (" (or a list of them)" if field.many else "")


def check_port(recipe: dict, overrides: dict[str, list[str]], table) -> None:
    """A run that serves (``source: live``, the default) on a port another program holds is refused now,
    before the model loads, rather than when the server starts."""

    def value(name: str, default):
        if overrides.get(name):
            return overrides[name][-1]
        return recipe.get(name, default)

    defaults = {"source": "live", "host": "127.0.0.1", "port": 7860}
    if table is not None:
        defaults = {name: table.defaults.get(name, default) for name, default in defaults.items()}
    if str(value("source", defaults["source"])) != "live":
        return
    host = str(value("host", defaults["host"]))
    try:
        port = int(value("port", defaults["port"]))
    except (TypeError, ValueError):
        return
    if port_taken(host, port):
        raise UserError(
            f"port {port} on {host} is in use (another server still running?): stop it, or choose another "
            "port with --port N"
        )


def port_taken(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because another socket holds it (a port of 0 never is)."""
    if not port:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is free
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


if __name__ == "__main__":
    target = PACKAGE_DIR / "recipe_field_table.py"
    target.write_text(table_source())
    print(f"wrote {target}")
