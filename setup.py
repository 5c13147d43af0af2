"""What pyproject.toml cannot say: the wheel's long description, and the Flower app's
configuration carried inside the package.

README.md links into docs/ and the sources by relative paths, which read well on the
repository but break on a package index's page, so the long description has them made
absolute.

`fedmc run` hands Flower an app directory whose pyproject.toml holds `[tool.flwr.app]`
(components and run config). A checkout has it at its root; an installed wheel has no
root, so the build copies pyproject.toml into the package as `APP_CONFIG`, where
`federation.runner.app_pyproject` finds it. One file stays the only source of both.
Everything else is in pyproject.toml.
"""

import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

REPOSITORY = "https://github.com/fedmc/fedmc-flwr/blob/main/"
RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)", re.IGNORECASE)
"""A Markdown link target that names no scheme (https:, mailto:), anchor or absolute path."""
HERE = Path(__file__).parent
APP_CONFIG = "flower_app.toml"
"""pyproject.toml's name inside the built package (`fedmc_flwr/flower_app.toml`)."""


def long_description(readme: str) -> str:
    """`readme` with every relative link target prefixed by the repository's URL."""
    return RELATIVE_LINK.sub(lambda m: f"]({REPOSITORY}{m.group(1)})", readme)


class BuildWithFlowerApp(build_py):
    """build_py, plus pyproject.toml copied into the built package as `APP_CONFIG`. An
    editable install imports the checkout, whose own pyproject.toml serves instead."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib) / "fedmc_flwr" / APP_CONFIG
            self.copy_file(str(HERE / "pyproject.toml"), str(target))


setup(
    long_description=long_description((HERE / "README.md").read_text()),
    long_description_content_type="text/markdown",
    cmdclass={"build_py": BuildWithFlowerApp},
)
