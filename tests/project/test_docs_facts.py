"""The docs against the code: facts the code holds are the facts the docs state.

- every audit event (`service.wire.events.EventName`) has its row in docs/api.md, and no page
  names an event the code does not write;
- what retention deletes (`service.lock.retention.Pruned`, whose fields are the labels of
  `lakelock_pruned_rows_total`) is what docs/operating.md and the setting's help say;
- the README is a front door: its first commands exist, it links every page, it stays short;
- every relative link resolves to a file and, for `#anchor`, to a heading of it; every `§N`
  reference names a section of its page; every lakelock module, file and `python -m` the docs
  name exists.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from service.lock.retention import Pruned
from service.server.settings import Settings
from service.wire.events import EventName

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted([README, ROOT / "benchmarks" / "README.md", *DOCS.glob("*.md")])
# the pages whose sections are numbered, so that code and docs cite them by `§N`
NUMBERED = ("design.md", "jobs.md", "catalog-front.md", "operating.md")
PACKAGES = ("service", "jobkit", "ingest_gate", "compactor", "demo", "testkit", "lakelock_submit")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose(text: str) -> str:
    """`text` without its fenced code blocks (their lines kept empty, so line numbers hold)."""
    return re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def _marked_table(page: Path, marker: str) -> list[list[str]]:
    """The rows (cells stripped) of the table between `<!-- {marker}` and `<!-- /{marker} -->`."""
    text = page.read_text()
    start = text.index("-->", text.index(f"<!-- {marker}")) + len("-->")
    body = text[start : text.index(f"<!-- /{marker} -->")]
    rows = [line.strip().strip("|").split("|") for line in body.strip().splitlines()]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # past the header and its rule


def _code(cell: str) -> str:
    found = re.fullmatch(r"`([^`]+)`", cell)
    assert found, f"a cell of one `name` expected, got {cell!r}"
    return found.group(1)


# -- the audit events --------------------------------------------------------------------------


def test_every_audit_event_has_its_row_in_the_api_docs():
    documented = [_code(row[0]) for row in _marked_table(DOCS / "api.md", "events")]
    assert len(documented) == len(set(documented)), "an event has two rows in docs/api.md"
    names = {str(name) for name in EventName}
    assert set(documented) - names == set(), "docs/api.md lists events the code never writes"
    assert names - set(documented) == set(), "events missing from docs/api.md's events table"
    assert all(row[1] for row in _marked_table(DOCS / "api.md", "events")), "say when"


def _not_events() -> set[str]:
    """Names shaped like events that are something else: the compactor's `[lease]` settings."""
    from compactor.config import LeaseConfig

    return {f"lease.{field.name}" for field in dataclasses.fields(LeaseConfig)}


def test_no_page_names_an_event_the_code_does_not_write():
    names = {str(name) for name in EventName}
    prefixes = "|".join(sorted({name.split(".")[0] for name in names}))
    shaped = re.compile(rf"`((?:{prefixes})\.[a-z_]+)`")
    unknown = [
        f"{_rel(page)}: {found}"
        for page in PAGES
        for found in shaped.findall(page.read_text())
        if found not in names | _not_events()
    ]
    assert unknown == []


# -- retention ---------------------------------------------------------------------------------

# Pruned's other fields count transactions and time, not rows
_NOT_ROWS = {"batches", "longest_batch_s"}


def _pruned() -> set[str]:
    return {field.name for field in dataclasses.fields(Pruned)} - _NOT_ROWS


def test_the_operating_page_lists_what_retention_prunes():
    rows = _marked_table(DOCS / "operating.md", "pruned")
    labels = {_code(row[-1]): row[0] for row in rows}
    assert set(labels) == _pruned(), "docs/operating.md §5 and service.server.retention differ"
    for label, what in labels.items():
        assert label.replace("_", " ") in what, f"{what!r} should name {label}"


def test_the_retention_setting_says_what_is_pruned():
    help_text = Settings.model_fields["retention_days"].description or ""
    for label in _pruned():
        assert label.replace("_", " ") in help_text, f"LAKELOCK_RETENTION_DAYS omits {label}"


def test_no_page_tells_of_retention_partially():
    """A paragraph that names the retention and ended commit leases names every kind it prunes."""
    partial = []
    for page in [README, *DOCS.glob("*.md")]:
        for paragraph in _prose(page.read_text()).split("\n\n"):
            said = " ".join(paragraph.split()).lower()
            if "lakelock_retention_days" in said and "commit lease" in said:
                missing = [
                    label
                    for label in _pruned() - {"events"}
                    if label.replace("_", " ").rstrip("s") not in said
                ]
                if missing:
                    partial.append(f"{_rel(page)}: {said[:80]}... omits {missing}")
    assert partial == []


# -- the README is a front door ----------------------------------------------------------------


def test_the_readme_starts_with_the_two_commands_and_stays_short():
    text = README.read_text()
    first = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    assert first is not None
    commands = [line.split("#")[0].split()[0] for line in first.group(1).strip().splitlines()]
    assert commands == ["bin/run", "bin/test"]
    for command in commands:
        assert (ROOT / command).is_file(), command
    assert text.index(first.group(0)) < text.index("\n## "), "the commands come first"
    assert len(text.splitlines()) <= 250


def test_the_readme_links_every_page():
    linked = {
        (ROOT / target).resolve()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    }
    pages = {page.resolve() for page in PAGES if page != README}
    assert pages - linked == set()


def test_the_readme_install_table_names_commands_that_exist():
    text = README.read_text()
    table = text[text.index("| host | install | commands |") :].split("\n\n")[0]
    scripts = re.findall(r"^(\S+) = ", _pyproject_scripts(), flags=re.M)
    for command in re.findall(r"`((?:lakelock|python -m)[^`]*)`", table):
        if command.startswith("python -m "):
            assert _module(command.split()[2]) is not None, command
        else:
            assert command.split()[0] in scripts, command


def _pyproject_scripts() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("[project.scripts]\n") + len("[project.scripts]\n")
    return text[start : text.index("\n\n", start)]


# -- links and section references --------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _prose(page.read_text()), flags=re.M):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", _prose(page.read_text()))
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_resolves(page):
    broken = []
    for link in _links(page):
        if re.match(r"[a-z]+:", link):
            continue  # http(s), mailto: not this test's to check
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and (target.suffix != ".md" or anchor not in _anchors(target)):
            broken.append(f"{link}: no such heading in {target.name}")
    assert broken == []


def _sections(name: str) -> set[str]:
    text = _prose((DOCS / name).read_text())
    numbers = re.findall(r"^## (\d+)\. ", text, flags=re.M)
    numbers += re.findall(r"^### (\d+\.\d+) ", text, flags=re.M)
    return set(numbers)


_CITED = re.compile(r"([\w-]+\.md)((?:(?:,| to| and)? §\d+(?:\.\d+)?)+)")


def _cited(text: str, here: str | None) -> list[tuple[str, str]]:
    """The (page, section) pairs `text` cites: `design.md §3.1`, `jobs.md §1, §2`, and, when
    `here` names the page the text is on, a bare `§4` of its own."""
    pairs = []
    for page, numbers in _CITED.findall(text):
        pairs += [(page, n) for n in re.findall(r"§(\d+(?:\.\d+)?)", numbers)]
    if here is not None:
        bare = _CITED.sub("", text)
        pairs += [(here, n) for n in re.findall(r"§(\d+(?:\.\d+)?)", bare)]
    return pairs


def _wrong_citations(pairs: list[tuple[str, str]]) -> list[str]:
    wrong = []
    for page, number in pairs:
        if page not in NUMBERED:
            wrong.append(f"{page} §{number}: {page} has no numbered sections")
        elif number not in _sections(page):
            wrong.append(f"{page} §{number}: no such section")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_section_cited_in_the_docs_exists(page):
    here = page.name if page.parent == DOCS and page.name in NUMBERED else None
    assert _wrong_citations(_cited(page.read_text(), here)) == []


def test_every_section_cited_in_the_code_exists():
    """The code cites the docs by section (`docs/design.md §3.2`); each must be there."""
    wrong = []
    for folder in (*PACKAGES, "tests", "migrations", "benchmarks", "deploy", "bin"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix not in {"", ".py", ".yml", ".html", ".toml"}:
                continue
            if "__pycache__" in path.parts:
                continue
            text = path.read_text(errors="replace")
            wrong += [f"{_rel(path)}: {w}" for w in _wrong_citations(_cited(text, None))]
    assert wrong == []


# -- names of the code -------------------------------------------------------------------------


def _module(dotted: str) -> Path | None:
    """The file of module `dotted` (a package's `__init__.py`, or its folder), or None."""
    path = ROOT.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py", path):
        if candidate.exists():
            return candidate
    return None


def _names_exist(dotted: str) -> bool:
    """`a.b.c.Name.attr`: the longest module prefix exists, and what follows it is named in it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        found = _module(".".join(parts[:cut]))
        if found is None:
            continue
        if found.is_dir():
            return cut == len(parts)
        text = found.read_text()
        return all(re.search(rf"\b{re.escape(name)}\b", text) for name in parts[cut:])
    return False


_DOTTED = re.compile(rf"`((?:{'|'.join(PACKAGES)})(?:\.\w+)+)(?:\([^`]*\))?`")
_PATH = re.compile(
    r"`((?:service|jobkit|ingest_gate|compactor|demo|testkit|lakelock_submit|benchmarks|"
    r"migrations|tests|deploy)/[\w./-]*)`"
)
_RUN_MODULE = re.compile(r"python -m ([\w.]+)")


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_lakelock_name_in_the_docs_exists(page):
    text = page.read_text()
    missing = [name for name in _DOTTED.findall(text) if not _names_exist(name)]
    missing += [path for path in _PATH.findall(text) if not (ROOT / path).exists()]
    missing += [
        f"python -m {module}"
        for module in _RUN_MODULE.findall(text)
        if module.split(".")[0] in (*PACKAGES, "benchmarks") and _module(module) is None
    ]
    assert missing == []
