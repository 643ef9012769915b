"""The README and the documentation pages stay connected, without building the site.

The site itself (``mkdocs build --strict``, which renders the API reference from the docstrings) is
CI's docs stage; these checks are fast and need no mkdocs: every relative link of the README and of
``docs/`` points to an existing file and, where it names one, an existing heading; every page is in
the ``mkdocs.yml`` navigation; every ``::: object`` the pages render can be imported; and the README
stays a short front door.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_BYTES = 10_000
"""The README is the front door: what it is, install, the two commands, links. Reference goes to docs/."""

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
AUTODOC = re.compile(r"^:::\s+([\w.]+)\s*$", re.M)


def pages() -> List[Path]:
    return sorted(DOCS.rglob("*.md"))


def prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (links there are examples, not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path: Path) -> Iterator[str]:
    for match in LINK.finditer(prose(path.read_text(encoding="utf-8"))):
        target = match.group(1)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked here
            yield target


def slug(heading: str, github: bool = False) -> str:
    """The anchor of a heading: Python-Markdown's ``toc`` slug (the site), or GitHub's (the README)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)  # inline code keeps its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"[*_]{1,2}([^*_]+)[*_]{1,2}", r"\1", text)
    if github:
        return re.sub(r" ", "-", re.sub(r"[^\w\- ]", "", text.strip().lower()))
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> Set[str]:
    """The headings' anchors of a page, plus the identifiers mkdocstrings renders there (``#pkg.Class``)."""
    text = path.read_text(encoding="utf-8")
    github = path.parent != DOCS and DOCS not in path.parents
    found: Set[str] = set()
    for _, heading in HEADING.findall(FENCE.sub("", text)):
        anchor = base = slug(heading, github)
        count = 0
        while anchor in found:  # a repeated heading gets a suffix
            count += 1
            anchor = f"{base}_{count}" if not github else f"{base}-{count}"
        found.add(anchor)
    return found | set(AUTODOC.findall(text))


def autodoc_anchor(anchor: str, page: Path) -> bool:
    """``#pkg.Class.member`` of an object the page renders with ``::: pkg.Class``."""
    rendered = AUTODOC.findall(page.read_text(encoding="utf-8"))
    return any(anchor == name or anchor.startswith(name + ".") for name in rendered)


def resolved_links() -> Iterator[Tuple[Path, str, Path, str]]:
    for source in [README, *pages()]:
        for target in links(source):
            path, _, anchor = target.partition("#")
            yield source, target, (source.parent / path).resolve() if path else source, anchor


@pytest.mark.parametrize("source", [README, *pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file_and_heading(source):
    broken = []
    for origin, target, path, anchor in resolved_links():
        if origin != source:
            continue
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif source != README and DOCS not in path.parents:
            broken.append(f"{target}: outside docs/ (the site cannot link it; name the file as code instead)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path) and not autodoc_anchor(anchor, path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{source.relative_to(ROOT)}: " + "; ".join(broken)


def nav_pages(entries) -> Iterator[str]:
    for entry in entries:
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, dict):
            for value in entry.values():
                yield from nav_pages(value) if isinstance(value, list) else [value]


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = list(nav_pages(config["nav"]))
    assert len(listed) == len(set(listed)), "a page is listed twice"
    on_disk = {str(page.relative_to(DOCS)) for page in pages()}
    assert on_disk - set(listed) == set(), "pages missing from mkdocs.yml's nav"
    assert set(listed) - on_disk == set(), "nav entries without a page"


def test_every_rendered_object_can_be_imported():
    missing = []
    for page in pages():
        for name in AUTODOC.findall(page.read_text(encoding="utf-8")):
            module, attribute = name, None
            while True:
                try:
                    obj = importlib.import_module(module)
                    break
                except ModuleNotFoundError:
                    module, _, tail = module.rpartition(".")
                    attribute = tail if attribute is None else f"{tail}.{attribute}"
                    if not module:
                        obj = None
                        break
            for part in attribute.split(".") if attribute and obj is not None else []:
                obj = getattr(obj, part, None)
            if obj is None:
                missing.append(f"{page.relative_to(ROOT)}: ::: {name}")
    assert not missing, "; ".join(missing)


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) < README_MAX_BYTES, "move reference material to docs/"
    # one command sets up a fresh machine and runs the default job; the tests in their two tiers
    # (.ci/run runs the full suite and the default run)
    assert (
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 --index-url "
        'https://download.pytorch.org/whl/cpu && pip install -e ".[test]" && '
        "comlrl-lightning fit --config configs/madpo.yaml\n"
    ) in text
    assert 'python -m pytest -q -m "not slow"            #' in text
    # the full suite as CI runs it: two worker processes, a test file kept in one
    assert "python -m pytest -q -n 2 --dist loadfile     #" in text
    assert "python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile" in (ROOT / ".ci" / "run").read_text()


def test_the_link_checker_catches_what_it_should(tmp_path):
    """The checks above are not vacuous: a broken file link, a missing heading, code and URLs."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A `code` heading: yes\n\n[a](page.md#a-code-heading-yes) [b](missing.md) "
        "`[c](ignored.md)` [d](https://example.invalid)\n\n```\n[e](ignored.md)\n```\n",
        encoding="utf-8",
    )
    assert list(links(page)) == ["page.md#a-code-heading-yes", "missing.md"]
    assert "a-code-heading-yes" in anchors(page)
    assert slug("Iterative training: rounds, comparators, replay") == "iterative-training-rounds-comparators-replay"
    assert slug("Where the parts' state lives") == "where-the-parts-state-lives"


@pytest.mark.slow  # the default run at its full size: about 20 s of CPU time
def test_the_numbers_the_readme_and_getting_started_quote_are_what_the_default_run_gives(tmp_path):
    """A newcomer's first run prints these numbers; they hold for every thread count on each CPU we
    measured, and the pages quote each CPU's (the iterative config's drift with the thread count
    too, and the pages say so instead of pinning them)."""
    from comlrl_lightning.cli import run_cli

    cli = run_cli(
        [
            "fit",
            "--config",
            "configs/madpo.yaml",
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.enable_progress_bar",
            "false",
        ]
    )
    before, after = f"{cli.model.initial_eval_reward:.4f}", f"{cli.model.final_eval_reward:.4f}"
    collection = f"collected {len(cli.datamodule.pairs)} preference pairs from {len(cli.datamodule.train_items)} items"
    collection += f" (candidate reward mean {cli.datamodule.last_collection.reward_mean:.4f})"
    readme = " ".join(README.read_text(encoding="utf-8").split())
    # the final value depends on the CPU's kernels: the README quotes each CPU it was measured on
    assert f"evaluation reward goes from {before} to " in readme
    assert f" to {after} on a 2-core " in readme, f"{after} is not a final reward the README quotes for a CPU"
    started = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    for line in (collection, f"reward_mean = {before}", f"reward_mean = {after}"):
        assert line in started, line
