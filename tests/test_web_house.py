"""One-file core, real extensions: the web app lives in durable_job_team/, outside what a job seals.

Every job seals its engine (durable_job.py through its engine mark; a store job's also store.py through its mark and
the migrations). The web app of `serve` (durable_job_team/web.py, its templates and static files) sits outside it: a
CSS tweak, a template's wording or a route's code changes no seal, so every job in flight stays resumable and
decidable; an edit of the engine is still refused.
"""

import ast
import os
import re

import pytest
from test_web import Serve

import durable_job as dj
from conftest import BOTH, REPO, Workspace, copy_house, engine_digest, in_the_engine
from durable_job_team import store as team_store

TEAM = os.path.join(REPO, "durable_job_team")
WEB = os.path.join(TEAM, "web.py")


def edit(path: str, old: str, new: str) -> None:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert text.count(old) == 1, (path, old)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text.replace(old, new))


def restyle_web_app(program: str) -> None:
    """A web-app-only release: new CSS, a template's new wording, a route's changed code."""
    team = os.path.join(os.path.dirname(program), "durable_job_team")
    with open(os.path.join(team, "static", "app.css"), "a", encoding="utf-8") as fh:
        fh.write(".live b{letter-spacing:.02em}\n")
    edit(os.path.join(team, "templates", "job.html"), "<h2>Decide</h2>", "<h2>Decide (restyled)</h2>")
    edit(os.path.join(team, "web.py"), 'title="Jobs",', 'title="All jobs",')


@BOTH
def test_editing_the_web_app_strands_no_job_and_editing_the_core_still_holds(ws, tmp_path):
    program = copy_house(tmp_path / "release")
    started = ws.run("start", "--manifest", ws.manifest, program=program).ok()
    assert started["interrupt"], started
    sealed = ws.job()["engineSha256"]
    assert sealed == engine_digest(store=bool(ws.store))

    restyle_web_app(program)
    assert ws.run("status", program=program).ok()["phase"] == "awaiting-review"

    # the core's engine edited: refused as ever, and the job is left as it was
    core = copy_house(tmp_path / "core-edited")
    with open(core, encoding="utf-8") as fh:
        text = fh.read()
    with open(core, "w", encoding="utf-8") as fh:
        fh.write(in_the_engine(text, "# a core edit"))
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x", program=core).held(
        "Engine changed", f"release {dj.__version__}"
    )

    # the store's engine edited (its code above the mark, or a migration it applied): a store job sealed them and is
    # refused; a state directory's job never runs that code, sealed none of it, and goes on
    parts = ws.job()["engineParts"]
    assert parts == (list(team_store.STORE_ENGINE_PARTS) if ws.store else ["durable_job.py"])
    for name, old, new in (
        ("store.py", "\nclass PgLock:", "\n# a store edit\nclass PgLock:"),
        ("migrations/m011_hostile_roles.sql", "\n", "\n-- a migration edit\n"),
    ):
        edited = copy_house(tmp_path / f"edited-{name.replace('/', '-')}")
        path = os.path.join(os.path.dirname(edited), "durable_job_team", *name.split("/"))
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text.replace(old, new, 1))
        again = ws.run("resume", program=edited)
        if ws.store:
            again.held("Engine changed", f"install durable-job=={ws.job()['release']}")
        else:
            assert again.ok()["interrupt"], again

    decided = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "restyled release decides", program=program).ok()
    assert decided["final"]["decision"] == "accept"
    assert ws.run("verify", program=program).code == 0
    assert ws.job()["engineSha256"] == sealed


def test_a_restyled_web_app_serves_and_decides_a_job_the_unchanged_core_sealed(tmp_path):
    """serve from a release whose web app changed: the page shows the new look, is not read-only, and its act is recorded."""
    ws = Workspace(tmp_path)
    ws.write_manifest()
    ws.start().ok()  # sealed by the repository's durable_job.py
    program = copy_house(tmp_path / "release")
    restyle_web_app(program)
    s = Serve(tmp_path, "--root", str(tmp_path), program=program)
    try:
        browser = s.client()
        browser.get("/?" + s.address.split("?", 1)[1])
        listing = browser.get("/").text
        assert "<title>All jobs · durable_job</title>" in listing and "letter-spacing:.02em" in listing
        answer = browser.get("/jobs/journey")
        page = answer.text
        assert "<h2>Decide (restyled)</h2>" in page and "Read-only" not in page
        # the CSS and the script are inlined under this response's nonce, and the policy allows nothing else
        policy = answer.headers["content-security-policy"]
        nonce = re.search(r"script-src 'nonce-([A-Za-z0-9_-]+)'; style-src 'nonce-\1';", policy).group(1)
        assert policy.startswith("default-src 'none';") and "'unsafe-inline'" not in policy
        assert page.count("<style") == page.count(f'<style nonce="{nonce}">') == 1
        assert page.count("<script") == page.count(f'<script nonce="{nonce}">') == 1
        digest = re.search(r'data-results="([0-9a-f]{64})"', page).group(1)
        token = re.search(r'name="csrftoken" value="([^"]+)"', page).group(1)
        fields = {"csrftoken": token, "decision": "hold", "reviewer": "Dana", "reason": "restyled", "resultsSha256": digest}
        assert browser.post("/jobs/journey/decision", data=fields).status_code == 303
    finally:
        s.kill()
    assert ws.run("status").ok()["phase"] == "decided"
    assert ws.run("verify").code == 0


# -- the house rules for an extension --------------------------------------------------------------------------------


def test_the_web_app_is_small_functions_over_the_command_api_with_no_module_state():
    with open(WEB, encoding="utf-8") as fh:
        source = fh.read()
    tree = ast.parse(source)
    long = [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80
    ]
    assert long == []
    mutable = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
    state = [ast.unparse(n)[:60] for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, mutable)]
    assert state == []
    assert not any(isinstance(n, ast.Global) for n in ast.walk(tree))
    imported = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    assert "durable_job" in imported and not re.search(r"^from durable_job import", source, re.M)


def test_the_pages_are_autoescaped_templates_and_the_css_and_script_files_of_their_own():
    import durable_job_team
    from durable_job_team import web

    assert os.path.dirname(durable_job_team.__file__) == TEAM  # this checkout's package, not an installed one
    pages = web.Pages("account")
    assert pages.env.autoescape is True
    for name in os.listdir(web.TEMPLATES):
        with open(os.path.join(web.TEMPLATES, name), encoding="utf-8") as fh:
            text = fh.read()
        assert "|safe" not in text.replace(" ", "") and "autoescape false" not in text, name
    assert sorted(os.listdir(web.STATIC)) == ["app.css", "app.js"]
    assert "<script" not in pages.script and "<style" not in pages.css
    with open(WEB, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    tags = re.compile(r"</?[a-z][a-z0-9]*[\s>/]")  # any tag: the web app's own markup lives in templates/
    assert not [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and tags.search(n.value)]
    hostile = '<script>alert("x")</script>'
    html = pages.env.get_template("error.html").render(heading=hostile, message=hostile, title=hostile, css="", nonce="n", csrftoken="t")
    assert hostile not in html and html.count("&lt;script&gt;") == 3


def test_one_rule_of_escaping_between_the_review_pages_sections_and_the_templates():
    """The core's sections (h(), section 14) and the web app's templates (Jinja) are one page system: each takes the
    other's markup as markup (the `__html__` protocol) and escapes everything else, once."""
    import markupsafe

    from durable_job_team import web

    hostile = '<script>alert("x")</script>'
    section = dj.h("<p>{}</p>", hostile)
    assert section == "<p>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</p>"
    placed = web.Pages("account").env.from_string("<div>{{ part }}</div>{{ text }}").render(part=section, text=hostile)
    assert placed == f"<div>{section}</div>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"  # neither escaped twice nor left raw
    form = markupsafe.Markup("<form>{}</form>").format(hostile)  # a template's markup, its values escaped by markupsafe
    assert dj.h("<li>{}</li>{}", form, hostile) == f"<li>{form}</li>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert dj.hjoin([section, form]) == section + form
    with pytest.raises(AssertionError, match="not markup"):
        dj.hjoin([section, hostile])  # text reaches a page only through h() or a template


def test_the_web_app_is_installed_with_the_program():
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as fh:
        project = fh.read()
    assert 'packages = ["durable_job_team"]' in project
    assert re.search(r'durable_job_team = \["templates/\*\.html", "static/\*", "migrations/\*\.sql"\]', project)
    assert 'files = ["durable_job.py", "durable_job_team"]' in project
