#!/usr/bin/env python3
"""Fail when a role's defaults/main.yml and meta/argument_specs.yml disagree.

Every variable in defaults/main.yml must be an option of the `main` entry
point in meta/argument_specs.yml and the other way round, every option needs
a description, and an option's `default`, when the spec states one, must equal
the value in defaults/main.yml.

    hack/check-argument-specs.py [ROLE_DIR ...]   (default: roles/*)

Exit status 0 when all roles agree, 1 otherwise (each problem on stderr).
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent


class SpecError(Exception):
    """A file that cannot be read as YAML."""


def load_yaml(path: Path) -> object:
    try:
        with path.open(encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as err:
        raise SpecError(f"{path}: cannot read: {err}") from err


def check_role(role: Path) -> list[str]:
    """Return the problems found in one role directory."""
    defaults_file = role / "defaults" / "main.yml"
    specs_file = role / "meta" / "argument_specs.yml"
    problems: list[str] = []
    if not defaults_file.is_file():
        return [f"{defaults_file}: missing"]
    if not specs_file.is_file():
        return [f"{specs_file}: missing (every role with defaults documents them)"]

    try:
        defaults = load_yaml(defaults_file) or {}
        specs = load_yaml(specs_file) or {}
    except SpecError as err:
        return [str(err)]
    if not isinstance(defaults, dict):
        return [f"{defaults_file}: not a mapping of variables"]
    try:
        options = specs["argument_specs"]["main"].get("options") or {}
    except (KeyError, TypeError, AttributeError):
        return [f"{specs_file}: no argument_specs.main entry point"]

    for name in sorted(set(defaults) - set(options)):
        problems.append(f"{defaults_file}: {name} has no option in meta/argument_specs.yml (document it)")
    for name in sorted(set(options) - set(defaults)):
        problems.append(f"{specs_file}: option {name} is not in defaults/main.yml (add a default or remove it)")
    for name, option in sorted(options.items()):
        if not isinstance(option, dict) or not option.get("description"):
            problems.append(f"{specs_file}: option {name} needs a description")
            continue
        if name in defaults and "default" in option and option["default"] != defaults[name]:
            problems.append(
                f"{specs_file}: option {name} default {option['default']!r} "
                f"differs from the defaults/main.yml value {defaults[name]!r}"
            )
    for name in sorted(defaults):
        if name.startswith("_"):
            problems.append(f"{defaults_file}: {name} is internal; internal variables live in vars/ or tasks")
    return problems


def main(argv: list[str]) -> int:
    roles = [Path(arg) for arg in argv] or sorted(
        path.parent.parent for path in (REPO_ROOT / "roles").glob("*/defaults/main.yml")
    )
    if not roles:
        print("check-argument-specs: no roles found", file=sys.stderr)
        return 1
    problems = [problem for role in roles for problem in check_role(role)]
    for problem in problems:
        print(f"check-argument-specs: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-argument-specs: {len(roles)} role(s) agree: " + ", ".join(role.name for role in roles))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
