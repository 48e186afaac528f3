#!/usr/bin/env python3
"""Fails when a role reads a variable it does not define.

kubespray runs kube-proxy-sync with `command` and passes every value on the
command line (docs/kubespray/0004); the role is for standalone Ansible. So
nothing under roles/ may read a kubespray variable (kube_version, bin_dir,
kube_proxy_mode, ...) or any other caller's: every name a role's Jinja reads
must be one the role defines itself (defaults, vars, its argument spec,
register, set_fact, loop_var, vars: of a task or block) or one of Ansible's
own (facts and magic variables). A caller's value comes in as the role's own
variable (kpsync_*), which it sets.

Usage: role_vars.py ROLE_DIR...; prints each name read and not defined, with
the files that read it, and exits 1 if there is one.
"""

import pathlib
import sys

import warnings

import jinja2
import jinja2.meta
import yaml

# Ansible's own names: magic variables and Jinja globals it adds.
ANSIBLE_NAMES = {
    "groups", "hostvars", "group_names", "inventory_hostname",
    "inventory_hostname_short", "inventory_dir", "inventory_file",
    "play_hosts", "playbook_dir", "role_path", "role_name", "omit", "item",
    "environment", "lookup", "query", "q", "now", "undef",
}
# a role's regex in a Jinja string ('\\s') is not this check's business
warnings.filterwarnings("ignore", category=DeprecationWarning, module="jinja2")
# keys whose string value is a bare Jinja expression
CONDITIONALS = {"when", "failed_when", "changed_when", "until", "that"}


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


class _Any(dict):
    """Every filter and test name exists: Ansible's and collections' are
    not Jinja's, and only the variables matter here."""

    def __contains__(self, key):
        return True

    def get(self, key, default=None):
        return super().get(key) or _anything

    def __missing__(self, key):
        return _anything


def _anything(*args, **kwargs):
    return None


class Role:
    def __init__(self, root):
        self.root = pathlib.Path(root)
        self.defined = set()
        self.reads = {}  # name -> set of files
        self.env = jinja2.Environment()
        self.env.filters, self.env.tests = _Any(self.env.filters), _Any(self.env.tests)

    def files(self):
        for sub in ("defaults", "vars", "tasks", "handlers", "meta"):
            d = self.root / sub
            if d.is_dir():
                yield from sorted(p for p in d.rglob("*") if p.suffix in (".yml", ".yaml"))

    def read(self, text, where, bare=False):
        if not isinstance(text, str):
            return
        if bare:
            text = "{{ " + text + " }}"
        elif "{{" not in text and "{%" not in text:
            return
        try:
            ast = self.env.parse(text)
        except jinja2.TemplateSyntaxError as e:
            raise SystemExit(f"{where}: cannot parse {text!r}: {e}")
        for name in jinja2.meta.find_undeclared_variables(ast):
            self.reads.setdefault(name, set()).add(where)

    def walk(self, node, where, key=None):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "register" and isinstance(v, str):
                    self.defined.add(v)
                elif k in ("set_fact", "ansible.builtin.set_fact") and isinstance(v, dict):
                    self.defined.update(x for x in v if x != "cacheable")
                elif k == "vars" and isinstance(v, dict):
                    self.defined.update(v)
                elif k == "loop_var" and isinstance(v, str):
                    self.defined.add(v)
                self.walk(v, where, k)
        elif isinstance(node, list):
            for v in node:
                self.walk(v, where, key)
        else:
            self.read(node, where, bare=key in CONDITIONALS)

    def check(self):
        for path in self.files():
            rel = str(path.relative_to(self.root.parent.parent)) if len(path.parts) > 2 else str(path)
            sub = path.relative_to(self.root).parts[0]
            for doc in load_all(path):
                if sub in ("defaults", "vars") and isinstance(doc, dict):
                    self.defined.update(doc)
                if sub == "meta" and path.stem == "argument_specs":
                    for spec in (doc.get("argument_specs") or {}).values():
                        self.defined.update((spec or {}).get("options") or {})
                    continue
                self.walk(doc, rel)
        return {
            name: sorted(files) for name, files in self.reads.items()
            if name not in self.defined and name not in ANSIBLE_NAMES
            and not name.startswith("ansible_")
        }


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    for root in argv:
        for name, files in sorted(Role(root).check().items()):
            bad += 1
            print(f"{root}: reads {name}, which the role does not define ({', '.join(files)}): "
                  f"a caller's value (kubespray's too) comes in as one of the role's own variables, "
                  f"set by the caller; define it in defaults/main.yml and read that instead",
                  file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
