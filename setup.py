"""Package discovery with the package-dir mapping of pyproject.toml's design.

exporters/, kernels/ and profiles/ are top-level folders that install as edgekit.exporters,
edgekit.kernels and edgekit.profiles. pyproject's ``packages.find`` names what it finds after the
folder (``exporters``), never after the mapped package, so it cannot find them; this finds every
package in each folder and names it under its mapped parent. Everything else is in pyproject.toml.
"""
from setuptools import find_packages, setup

PACKAGE_DIR = {"edgekit": "edgekit", "edgekit.exporters": "exporters",
               "edgekit.kernels": "kernels", "edgekit.profiles": "profiles"}

packages: list[str] = []
for parent, folder in PACKAGE_DIR.items():
    packages += [parent, *(f"{parent}.{sub}" for sub in find_packages(where=folder))]

setup(package_dir=PACKAGE_DIR, packages=packages)
