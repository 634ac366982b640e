"""The README's example policy and its tests are the files in examples/."""

import pathlib
import re
import unittest

HERE = pathlib.Path(__file__).resolve().parent.parent


class Readme(unittest.TestCase):
    def test_the_code_in_the_readme_is_the_example_files(self):
        readme = (HERE / "README.md").read_text()
        blocks = re.findall(r"<!-- (\S+) -->\n```python\n(.*?)```\n", readme, re.S)
        self.assertEqual([path for path, _ in blocks],
                         ["examples/zonespread/zonespread.py", "examples/zonespread/test_zonespread.py"])
        for path, code in blocks:
            self.assertEqual(code, (HERE / path).read_text(), f"README.md shows an old {path}")

    def test_build_sh_documents_its_modes(self):
        readme = (HERE / "README.md").read_text()
        for mode in ("--test", "--toolchain", "--bindings", "--policy DIR", "--test-policy DIR"):
            self.assertIn(f"build.sh {mode}", readme)
            self.assertIn(mode, (HERE / "build.sh").read_text())


if __name__ == "__main__":
    unittest.main()
