"""The starter `wasmgpu policy new NAME --lang python` writes (the templates
in host/src/cli/policy_new/python): rendered into a temporary directory as
the Rust side renders them, its tests pass against this SDK."""

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent.parent
ROOT = HERE.parent.parent
TEMPLATES = ROOT / "host/src/cli/policy_new/python"


def render(text, name="zone-first"):
    """The placeholders filled in as host/src/cli/policy_new/ports.rs fills them."""
    ident = name.replace("-", "_")
    return (text.replace("{{name}}", name)
            .replace("{{Type}}", "".join(part.capitalize() for part in name.split("-")))
            .replace("{{ident}}", ident)
            .replace("{{sdk}}", str(HERE))
            .replace("{{wasm}}", f"{ident}.wasm"))


def listed():
    """FILES: `TEMPLATE -> PATH-IN-STARTER`, one a line."""
    lines = (TEMPLATES / "FILES").read_text().splitlines()
    return [tuple(part.strip() for part in line.split("->")) for line in lines if line.strip()]


@unittest.skipUnless(TEMPLATES.is_dir(), f"no {TEMPLATES} (not a wasmgpu checkout)")
class Starter(unittest.TestCase):
    def test_files_lists_every_template_and_only_known_placeholders_are_used(self):
        self.assertEqual(sorted(t for t, _ in listed()),
                         sorted(p.name for p in TEMPLATES.iterdir() if p.name.endswith(".tmpl")))
        for template, _ in listed():
            text = (TEMPLATES / template).read_text()
            self.assertEqual(set(re.findall(r"\{\{\w+\}\}", text)) - {"{{name}}", "{{Type}}", "{{ident}}", "{{sdk}}",
                                                                        "{{wasm}}"}, set(), template)

    def test_the_readme_starts_with_the_commands_to_run(self):
        readme = render((TEMPLATES / "README.md.tmpl").read_text())
        block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
        commands = [line.split("#")[0].split() for line in block.splitlines()]
        self.assertEqual([c[:3] for c in commands[:4]], [
            [f"{HERE}/build.sh", "--test-policy", "."],
            [f"{HERE}/build.sh", "--policy", "."],
            ["wasmgpu", "policy", "check"],
            ["wasmgpu", "policy", "run"],
        ])
        self.assertIn("zone_first.wasm", commands[1])

    def test_its_tests_pass_against_this_sdk(self):
        with tempfile.TemporaryDirectory() as tmp:
            for template, path in listed():
                (pathlib.Path(tmp) / path).write_text(render((TEMPLATES / template).read_text()))
            done = subprocess.run(
                [sys.executable, "-m", "unittest", "discover", "-s", ".", "-t", ".", "-p", "test_*.py"],
                cwd=tmp, capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONDONTWRITEBYTECODE": "1"})
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertRegex(done.stderr, r"Ran 6 tests")
            self.assertEqual(sorted(p.name for p in pathlib.Path(tmp).iterdir()), sorted(p for _, p in listed()))


if __name__ == "__main__":
    unittest.main()
