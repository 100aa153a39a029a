"""docs/api.md documents the whole public API: every name of ``geasync.__all__`` and the optional public modules
has its ``::: geasync.<name>`` entry (mkdocstrings renders it from the docstrings), and every entry names something
that exists."""

from __future__ import annotations

import importlib
import re

import geasync as ga
from conftest import ROOT

API_PAGE = ROOT / "docs" / "api.md"
OPTIONAL_MODULES = {"prometheus", "serve", "pytest_plugin"}  # imported by their own names, not re-exported


def documented() -> set[str]:
    return set(re.findall(r"^::: geasync\.([A-Za-z_][\w.]*)\s*$", API_PAGE.read_text(), re.M))


def test_every_exported_name_is_documented():
    missing = sorted(set(ga.__all__) - documented())
    assert not missing, f"docs/api.md has no '::: geasync.<name>' entry for {missing}"


def test_the_optional_public_modules_are_documented():
    assert OPTIONAL_MODULES <= documented()


def test_every_entry_names_something_that_exists():
    for name in sorted(documented()):
        head = name.split(".")[0]
        if head in OPTIONAL_MODULES:
            continue  # (their extras may be missing here; the docs build reads them from the source)
        target = importlib.import_module("geasync")
        for part in name.split("."):
            target = getattr(target, part)
        assert head in ga.__all__, f"docs/api.md documents geasync.{name}, which geasync.__all__ does not export"
