"""Take what docs/kubespray/0004-*.patch adds to kubespray, from the patch itself.

prepare.yml runs it: python3 extract.py PATCH prints one JSON object, each
value a file's text for the stand-in roles:

  tasks         roles/kubernetes/control-plane/tasks/kube-proxy-sync.yml (a new
                file: its + lines)
  include       the task the patch adds to kubeadm-setup.yml (its + lines)
  validate      the task the patch adds to validate_inventory's tasks
  defaults      every top-level variable the patch adds to the control-plane
                role's defaults and to kubespray_defaults (defaults and vars:
                the checksums too), and its entry in kubespray_defaults'
                downloads, as one YAML defaults file

A variable the patch only changes (a + line inside a variable it leaves
otherwise as it is) is not taken. Exits non-zero, saying what is missing,
when the patch does not have one of these.
"""

import json
import re
import sys

TASKS = "roles/kubernetes/control-plane/tasks/kube-proxy-sync.yml"
INCLUDE = "roles/kubernetes/control-plane/tasks/kubeadm-setup.yml"
VALIDATE = "roles/validate_inventory/tasks/main.yml"
DEFAULTS = (
    "roles/kubernetes/control-plane/defaults/",
    "roles/kubespray_defaults/defaults/",
    "roles/kubespray_defaults/vars/",
)
# the mapping whose new entry the patch adds indented, under this key (the
# hunk header names it: git's function context)
MAPPINGS = ("downloads",)


def hunks(patch):
    """Yield (file, hunk header text, [lines]) for each hunk."""
    file, header, lines = None, None, None
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            if lines is not None:
                yield file, header, lines
            file, header, lines = None, None, None
        elif line.startswith("+++ "):
            file = line[4:].removeprefix("b/")
        elif line.startswith("@@ ") and file is not None:
            if lines is not None:
                yield file, header, lines
            header, lines = line.split("@@", 2)[2].strip(), []
        elif lines is not None and line[:1] in ("+", "-", " ", ""):
            lines.append(line)
    if lines is not None:
        yield file, header, lines


def added(patch, path):
    text = "".join(
        line[1:] + "\n" for file, _, lines in hunks(patch) if file == path for line in lines if line.startswith("+")
    )
    if not text.strip():
        sys.exit(f"the patch adds nothing to {path}")
    return text


def variables(patch):
    """The top-level variables the patch adds (with the comment lines above
    each), and the entries it adds under MAPPINGS, as one YAML text."""
    top, nested = [], {}
    for file, header, lines in hunks(patch):
        if not file.startswith(DEFAULTS):
            continue
        block, kind = [], None
        for line in lines + [" "]:
            body = line[1:]
            if line.startswith("+") and kind is None and re.match(r"#|\w+:", body):
                # a new variable (its comments first), or a comment above one
                block.append(body)
                if re.match(r"\w+:", body):
                    kind = "top"
            elif line.startswith("+") and kind is None and header.rstrip(":") in MAPPINGS and re.match(r"  \w+:", body):
                block, kind = [body], header.rstrip(":")
            elif line.startswith("+") and kind is not None and (body.startswith(" ") or not body.strip()):
                block.append(body)
            else:
                if kind == "top":
                    top.extend(block)
                elif kind is not None:
                    nested.setdefault(kind, []).extend(block)
                block, kind = [], None
                if line.startswith("+") and re.match(r"\w+:", body):
                    block, kind = [body], "top"
    if not top:
        sys.exit("the patch adds no variable to kubespray's defaults")
    for key in MAPPINGS:
        if key not in nested:
            sys.exit(f"the patch adds no entry to kubespray_defaults' {key}")
    text = "".join(line + "\n" for line in top)
    for key, block in nested.items():
        text += f"{key}:\n" + "".join(line + "\n" for line in block)
    return text


def main():
    patch = open(sys.argv[1]).read()
    out = {
        "tasks": added(patch, TASKS),
        "include": added(patch, INCLUDE),
        "validate": added(patch, VALIDATE),
        "defaults": "---\n# from " + sys.argv[1].rsplit("/", 1)[-1] + "\n" + variables(patch),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
