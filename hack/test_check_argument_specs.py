#!/usr/bin/env python3
"""Self-test of hack/check-argument-specs.py: it must pass on the real role and
fail when defaults/main.yml and meta/argument_specs.yml drift apart.

    python3 -m unittest hack/test_check_argument_specs.py   (or run this file)
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HACK = Path(__file__).resolve().parent
CHECK = HACK / "check-argument-specs.py"
ROLE = HACK.parent / "roles" / "kube_proxy_sync"


class CheckArgumentSpecsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="check-argument-specs-"))
        self.role = self.tmp / ROLE.name
        shutil.copytree(ROLE / "defaults", self.role / "defaults")
        shutil.copytree(ROLE / "meta", self.role / "meta")

    def tearDown(self) -> None:
        shutil.rmtree(self.tmp)

    def run_check(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(CHECK), str(self.role)],
            capture_output=True,
            text=True,
            check=False,
        )

    def append(self, relative: str, text: str) -> None:
        with (self.role / relative).open("a", encoding="utf-8") as handle:
            handle.write(text)

    def add_option(self, text: str) -> None:
        """Insert an option at the top of the main entry point's options."""
        specs = self.role / "meta" / "argument_specs.yml"
        lines = specs.read_text(encoding="utf-8").splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if line.startswith("    options:")) + 1
        specs.write_text("".join(lines[:at]) + text + "".join(lines[at:]), encoding="utf-8")

    def test_real_role_passes(self) -> None:
        result = self.run_check()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("agree", result.stdout)

    def test_default_without_spec_fails(self) -> None:
        self.append("defaults/main.yml", "kube_proxy_sync_undocumented: 42\n")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("kube_proxy_sync_undocumented has no option", result.stderr)

    def test_spec_without_default_fails(self) -> None:
        self.add_option("      kube_proxy_sync_spec_only:\n        type: str\n        description: Only in the spec.\n")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("option kube_proxy_sync_spec_only is not in defaults", result.stderr)

    def test_spec_default_mismatch_fails(self) -> None:
        specs = self.role / "meta" / "argument_specs.yml"
        text = specs.read_text(encoding="utf-8")
        self.assertIn("default: kube-system", text)
        specs.write_text(text.replace("default: kube-system", "default: default", 1), encoding="utf-8")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("kube_proxy_sync_namespace default 'default' differs", result.stderr)

    def test_option_without_description_fails(self) -> None:
        self.append("defaults/main.yml", "kube_proxy_sync_terse: 1\n")
        self.add_option("      kube_proxy_sync_terse:\n        type: int\n")
        result = self.run_check()
        self.assertEqual(result.returncode, 1)
        self.assertIn("kube_proxy_sync_terse needs a description", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
