"""The documentation: a short README, a site whose every page is in the navigation, API pages
that list exactly each package's ``__all__``, and a configuration that builds offline.

The strict build itself (``mkdocs build --strict``: broken links and anchors, docstrings that do
not parse, the CLI reference) is a step of ``.ci/run``.
"""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
API = DOCS / "reference" / "api"


def _config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    return config


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def _all_of(module: str) -> list[str]:
    """A module's ``__all__``: read from its source when it is a literal, else from the module
    (``tooltrace`` builds it from its one list of public names)."""
    base = REPO.joinpath(*module.split("."))
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                try:
                    return list(ast.literal_eval(node.value))
                except ValueError:
                    return list(importlib.import_module(module).__all__)
    raise AssertionError(f"{source} has no __all__")


def _directives(page: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each ``::: identifier`` of a page with its indented YAML options."""
    found = []
    for m in re.finditer(r"^::: (\S+)\n((?:    .*\n|\n)*)", page.read_text(), flags=re.M):
        block = yaml.safe_load(textwrap.dedent(m.group(2))) or {}
        found.append((m.group(1), block.get("options", {})))
    return found


def test_the_readme_is_short_and_starts_with_the_two_set_up_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    head = "\n".join(lines[:20])
    demo = (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all]' && .venv/bin/tooltrace demo"
    )
    assert demo in head
    assert "\nbash .ci/run\n" in head


def test_the_readmes_links_into_the_docs_resolve() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    for link in local:
        assert (REPO / link).exists(), f"README.md links to a missing {link}"


def test_every_docs_page_is_in_the_navigation_and_every_entry_exists() -> None:
    nav = _nav_pages(_config()["nav"])
    assert len(nav) == len(set(nav)), "a page is listed twice in the navigation"
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_the_site_builds_offline_and_strictly() -> None:
    config = _config()
    assert config["strict"] is True
    assert config["theme"]["font"] is False, "web fonts would be fetched from Google"
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert "social" not in plugins and "privacy" not in plugins
    assert not config.get("extra_javascript") and not config.get("extra_css")
    handlers = next(p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    python = handlers["mkdocstrings"]["handlers"]["python"]
    assert "inventories" not in python, "inventories are downloaded at build time"
    assert "mkdocs-click" in config["markdown_extensions"]


def test_api_pages_list_exactly_each_public_packages_all() -> None:
    documented = {}
    for page in sorted(API.glob("*.md")):
        for module, options in _directives(page):
            assert not any(part.startswith("_") for part in module.split(".")), (
                f"{page.name} documents the private module {module}"
            )
            members = options.get("members")
            assert isinstance(members, list), f"{page.name}: ::: {module} needs members:"
            assert sorted(members) == sorted(_all_of(module)), (
                f"{page.name}: members of {module} differ from its __all__"
            )
            documented[module] = page.name
    assert {"tooltrace", "tooltrace.builtins", "tooltrace.telemetry", "tooltrace.archive",
            "tooltrace.mcp", "tooltrace.testing"} <= set(documented)
    # The audit package is documented once, on its own page.
    audit = [m for m in documented if m.endswith(".audit")]
    assert len(audit) == 1 and documented[audit[0]] == "audit.md"


def test_api_pages_show_no_source() -> None:
    handlers = next(p for p in _config()["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    assert handlers["mkdocstrings"]["handlers"]["python"]["options"]["show_source"] is False


def test_the_cli_reference_renders_the_whole_lazy_command_group() -> None:
    # mkdocs-click walks the group through list_commands/get_command, which load every command
    # of the command map; no :commands: filter may leave one out.
    page = (DOCS / "reference" / "cli.md").read_text()
    assert ":module: tooltrace.cli" in page and ":command: main" in page
    assert ":prog_name: tooltrace" in page
    assert ":commands:" not in page


def test_the_docs_state_figures_without_a_measurement_diary() -> None:
    # Current figures, with their date and command; history goes to CHANGELOG.md.
    diary = re.compile(r"\bwas \d|\b\d{1,2}:\d{2} UTC\b|\bbefore compiling\b", re.I)
    for page in DOCS.rglob("*.md"):
        for n, line in enumerate(page.read_text().splitlines(), 1):
            assert not diary.search(line), f"{page.relative_to(REPO)}:{n}: {line.strip()}"


def _sections(nav: Any) -> list[tuple[str, list[str]]]:
    """Each top-level entry of the navigation as (title, the pages a reader must reach from the
    README): a page; or a section's pages, a nested section counting by its first page (its
    index: the runbooks, the API pages)."""
    out: list[tuple[str, list[str]]] = []
    for item in nav:
        title, value = next(iter(item.items())) if isinstance(item, dict) else (item, item)
        if isinstance(value, str):
            out.append((title, [value]))
            continue
        pages = []
        for child in value:
            inner = next(iter(child.values())) if isinstance(child, dict) else child
            pages.append(inner if isinstance(inner, str) else _nav_pages(inner)[0])
        out.append((title, pages))
    return out


def test_the_readme_links_every_section_of_the_docs() -> None:
    linked = {
        str((REPO / link).resolve().relative_to(DOCS))
        for link in re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README.read_text())
    }
    sections = _sections(_config()["nav"])
    assert {"Framework adapters", "Guide", "Audit", "Reference"} <= {t for t, _ in sections}
    for title, pages in sections:
        unlinked = [p for p in pages if p not in linked]
        assert not unlinked, f"README.md does not link the docs section {title!r}: {unlinked}"


def test_the_readme_names_the_framework_adapters_first_among_the_ways_in() -> None:
    text = README.read_text()
    inside = text[text.index("## What is inside"):text.index("## Documentation")]
    first = inside.split("\n- ")[1]
    assert first.startswith("**Ways in**")
    for page in sorted((DOCS / "integrations").glob("*.md")):
        assert f"(docs/integrations/{page.name})" in first, page.name


def _extras_table() -> dict[str, str]:
    text = (DOCS / "getting-started.md").read_text()
    section = text[text.index("## Extras"):]
    section = section[: section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            rows[cells[0].strip("`")] = cells[1]
    return rows


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_extras_table_matches_pyproject() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    table = _extras_table()
    assert sorted(table) == sorted(extras), "docs/getting-started.md's extras table"
    for name, requirements in extras.items():
        cell = table[name]
        named = {_normal(n) for n in re.findall(r"`([^`]+)`", cell)}
        own = [r for r in requirements if r.startswith("tooltrace[")]
        packages = [_normal(re.split(r"[\s<>=~!;\[]", r, maxsplit=1)[0])
                    for r in requirements if not r.startswith("tooltrace[")]
        included = {_normal(x) for r in own for x in r[len("tooltrace["):-1].split(",")}
        # An extra made of other extras names exactly those; one of a few packages names each.
        assert included <= named, f"extra {name!r}: the table should name {sorted(included)}"
        if own and not packages:
            assert named == included, f"extra {name!r}: the table names {sorted(named)}"
        if len(packages) <= 4:
            missing = [p for p in packages if p not in named]
            assert not missing, f"extra {name!r}: the table does not name {missing}"
