"""The wheel's long description: README.md with its relative links made absolute.

README.md links into docs/ and the sources by relative paths, which read well on the
repository but break on a package index's page. Everything else is in pyproject.toml.
"""

import re
from pathlib import Path

from setuptools import setup

REPOSITORY = "https://github.com/fedmc/fedmc-flwr/blob/main/"
RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)\)", re.IGNORECASE)
"""A Markdown link target that names no scheme (https:, mailto:), anchor or absolute path."""


def long_description(readme: str) -> str:
    """`readme` with every relative link target prefixed by the repository's URL."""
    return RELATIVE_LINK.sub(lambda m: f"]({REPOSITORY}{m.group(1)})", readme)


setup(
    long_description=long_description(Path(__file__).with_name("README.md").read_text()),
    long_description_content_type="text/markdown",
)
