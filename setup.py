"""The wheel carries the top-level ``templates/`` and ``site-configs/`` inside the package
(``hpctrain/templates/``, ``hpctrain/site-configs/``), where an installed hpctrain looks for
them (``hpctrain/common/shipped.py``). Everything else is in ``pyproject.toml``."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = {"templates": ".j2", "site-configs": ".toml"}


class BuildWithShippedFiles(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout itself
        for folder, suffix in SHIPPED.items():
            target = os.path.join(self.build_lib, "hpctrain", folder)
            self.mkpath(target)
            for name in sorted(os.listdir(folder)):
                if name.endswith(suffix):
                    self.copy_file(os.path.join(folder, name), os.path.join(target, name))


setup(cmdclass={"build_py": BuildWithShippedFiles})
