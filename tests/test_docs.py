"""The README and the pages under docs/: every relative link lands, the README stays short, its first job runs.

The README is the front door (what the tool is, the two commands, a first job, where the rest is); each
page under docs/ holds one part of what it used to say, and docs/CONTRACT.md stays the reference they
link to. A link to a page that moved, or to a heading that was renamed, fails here.
"""

import glob
import json
import os
import re
import shlex
import subprocess
import sys

from conftest import PROGRAM, REPO, clean_env

README = os.path.join(REPO, "README.md")
PAGES = [README, *sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(path: str) -> list[str]:
    """The file's lines outside fenced code blocks (a link or heading inside a code block is none)."""
    lines, fenced = [], False
    with open(path, encoding="utf-8") as fh:
        for line in fh.read().splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation removed (backticks too), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (`-1`, `-2`, …)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path):
        match = re.match(r"#{1,6} (.+)", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(path: str) -> list[str]:
    return [
        target
        for target in LINK.findall("\n".join(prose(path)))  # a link's text may run over a line break
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: are not files here
    ]


def test_the_slug_is_githubs():
    assert slug("The manifest (schemaVersion 1)") == "the-manifest-schemaversion-1"
    assert slug("A team's store (`--store URL --job JOB_ID`)") == "a-teams-store---store-url---job-job_id"
    assert slug("Walk-through: a real `openai` job") == "walk-through-a-real-openai-job"


def test_every_relative_link_names_a_file_that_exists_and_a_heading_it_has():
    checked, broken = 0, []
    for page in PAGES:
        for target in relative_links(page):
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
            where = f"{os.path.relpath(page, REPO)}: ]({target})"
            checked += 1
            if not os.path.exists(dest):
                broken.append(f"{where}: no file {os.path.relpath(dest, REPO)}")
            elif anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
                broken.append(f"{where}: no heading with anchor #{anchor} in {os.path.relpath(dest, REPO)}")
    assert not broken, "\n".join(broken)
    assert checked > 40  # the README and the pages do link to each other and to the contract


def test_the_readme_is_short_and_links_every_page_under_docs():
    with open(README, encoding="utf-8") as fh:
        readme = fh.read()
    assert len(readme.splitlines()) <= 200
    for page in PAGES[1:]:
        assert f"](docs/{os.path.basename(page)})" in readme, page
    assert "make demo" in readme and "make test" in readme


def test_every_page_under_docs_links_the_contract():
    for page in PAGES[1:]:
        if os.path.basename(page) != "CONTRACT.md":
            assert any(t.startswith("CONTRACT.md") for t in relative_links(page)), page


def test_the_readmes_first_job_runs_as_printed(tmp_path):
    """The README's "A first job" block, line by line in a shell, with `durable-job` this checkout's program."""
    with open(README, encoding="utf-8") as fh:
        readme = fh.read()
    section = readme[readme.index("## A first job") :]
    block = section[section.index("```sh\n") + len("```sh\n") : section.index("\n```", section.index("```sh\n"))]
    commands = block.replace("\\\n", " ").splitlines()
    assert commands[0] == ". .venv/bin/activate"  # what `make demo` made; here the tests' own interpreter
    env = clean_env()
    env["HOME"] = str(tmp_path)
    program = f"{shlex.quote(sys.executable)} {shlex.quote(PROGRAM)}"
    seen = {}
    for command in commands[1:]:
        command = re.sub(r"^durable-job (\w+) ", lambda m: f"{program} {m.group(1)} --json ", command)
        if "<resultsSha256 from inspect>" in command:
            command = command.replace("<resultsSha256 from inspect>", seen["resultsSha256"])
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        if " inspect " in command:
            seen = json.loads(proc.stdout)
            assert seen["phase"] == "awaiting-review" and (tmp_path / "jobs" / "first" / "review.html").exists()
            failed_on, repair_cost = seen["answer"]["facts"]
            assert failed_on["statedBy"][0]["value"] == "3 March" and repair_cost["note"] == "The sources do not state the repair cost."
            draft = seen["answer"]["draft"]  # the first job drafts: the day stated from its quote, the cost's note the program's
            assert draft["status"] == "validated" and draft["text"].endswith("The sources do not state the repair cost.")
    verified = json.loads(proc.stdout)
    assert verified["ok"] is True, verified
