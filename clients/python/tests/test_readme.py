"""The README's example runs as written and prints what the README says it prints."""

import os
import re
import subprocess
import sys
import unittest

from _support import HANG_S, PACKAGE_ROOT, binary

README = os.path.join(PACKAGE_ROOT, "README.md")


def blocks(lang: str):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


class ReadmeTest(unittest.TestCase):
    def test_the_example_prints_what_the_readme_shows(self):
        (code,) = blocks("python")
        want = blocks("text")[0]
        env = dict(os.environ, TIMEWHEEL_BIN=binary(), PYTHONPATH=PACKAGE_ROOT)
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=HANG_S)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout, want)


if __name__ == "__main__":
    unittest.main()
