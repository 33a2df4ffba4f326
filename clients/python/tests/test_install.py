"""`pip install ./clients/python` works without a package registry: pip builds the wheel in an
isolated environment with the in-tree backend (build_backend/jitterd_build.py) and installs nothing
else. Checked in a fresh virtual environment, pip forbidden to reach any index."""

import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


class InstallTest(unittest.TestCase):
    def test_pip_installs_the_package_offline_with_its_plugin_entry_point(self):
        with tempfile.TemporaryDirectory() as work:
            venv = os.path.join(work, "venv")
            made = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
            if made.returncode != 0:
                self.skipTest("no venv with pip here (Debian: python3-venv): " + made.stderr.strip())
            python = os.path.join(venv, "bin", "python")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            install = subprocess.run([python, "-m", "pip", "install", PACKAGE], capture_output=True,
                                     text=True, env=env, cwd=work)
            self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
            probe = subprocess.run(
                [python, "-c",
                 "import importlib.metadata as m, jitterd; "
                 "print(jitterd.__version__, [e.value for e in m.entry_points(group='pytest11')])"],
                capture_output=True, text=True, cwd=work)
            self.assertEqual(probe.stdout.strip(), "0.1.0 ['jitterd.pytest_plugin']", probe.stderr)

    def test_the_wheel_holds_the_package_and_a_record_of_it(self):
        sys.path.insert(0, os.path.join(PACKAGE, "build_backend"))
        try:
            import jitterd_build
        finally:
            sys.path.pop(0)
        with tempfile.TemporaryDirectory() as out:
            name = jitterd_build.build_wheel(out)
            self.assertEqual(name, "jitterd-0.1.0-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(out, name)) as wheel:
                names = set(wheel.namelist())
                record = wheel.read("jitterd-0.1.0.dist-info/RECORD").decode()
            for member in ("jitterd/__init__.py", "jitterd/pytest_plugin.py", "jitterd/py.typed",
                           "jitterd-0.1.0.dist-info/METADATA", "jitterd-0.1.0.dist-info/WHEEL"):
                self.assertIn(member, names)
                self.assertIn(member + ",", record)


if __name__ == "__main__":
    unittest.main()
