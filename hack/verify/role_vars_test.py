"""Tests of role_vars.py: the check that a role reads no caller's variable."""

import pathlib
import tempfile
import textwrap
import unittest

import role_vars

REPO = pathlib.Path(__file__).resolve().parents[2]


def role(files):
    d = tempfile.TemporaryDirectory()
    root = pathlib.Path(d.name) / "roles" / "r"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return d, root


class RoleVarsTest(unittest.TestCase):
    def test_a_callers_variable_is_named(self):
        d, root = role({
            "defaults/main.yml": """\
                r_bin: "{{ bin_dir }}/kube-proxy-sync"
                r_version: ""
                """,
            "meta/argument_specs.yml": """\
                argument_specs:
                  main:
                    options:
                      r_spec_only: {type: str}
                """,
            "tasks/main.yml": """\
                - name: Read
                  ansible.builtin.command: "{{ r_bin }} --x {{ r_spec_only }} {{ item }} {{ r_host }}"
                  loop: "{{ groups['kube_control_plane'] }}"
                  register: r_out
                  when: kube_version is version('1.28', '>=') and r_version | length > 0
                - name: Fact
                  ansible.builtin.set_fact:
                    r_fact: "{{ r_out.stdout | bool }}"
                - name: Loop
                  ansible.builtin.debug:
                    msg: "{{ r_node }} {{ r_fact }} {{ ansible_facts.os_family }} {{ inventory_hostname }}"
                  loop: [1]
                  loop_control:
                    loop_var: r_node
                  vars:
                    r_host: "{{ hostvars[inventory_hostname].x | default(omit) }}"
                """,
        })
        with d:
            self.assertEqual(role_vars.Role(root).check(), {
                "bin_dir": ["roles/r/defaults/main.yml"],
                "kube_version": ["roles/r/tasks/main.yml"],
            })
            self.assertEqual(role_vars.main([str(root)]), 1)

    def test_the_projects_roles_read_only_their_own(self):
        for root in sorted((REPO / "roles").iterdir()):
            if (root / "tasks").is_dir():
                with self.subTest(role=root.name):
                    self.assertEqual(role_vars.Role(root).check(), {})


if __name__ == "__main__":
    unittest.main()
