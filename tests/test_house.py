"""The house (issue 31): durable_job.py reads top to bottom in numbered sections, each using only what stands above it."""

import ast
import hashlib
import os
import re
import symtable

import pytest

from conftest import PROGRAM
from durable_job_team import store as team_store

SECTION = re.compile(r"# (\d+)\. (.+)")


def sections(lines: list) -> list:
    """(first line number, section number, title) of each banner: a `# N. Title` line under a row of #."""
    found = []
    for n, line in enumerate(lines):
        m = SECTION.fullmatch(line)
        if m and n and lines[n - 1].startswith("#####"):
            found.append((n + 1, int(m.group(1)), m.group(2)))
    return found


def uses_from_below(source: str) -> list:
    """(section, where, name, the name's section) of every top-level name used above the section that defines it: in a
    function or class body (its free names, through symtable) or a module-level statement."""
    banners = sections(source.splitlines())

    def section_of(lineno: int) -> int:
        return max((number for start, number, _ in banners if lineno >= start), default=0)

    tree = ast.parse(source)
    defined: dict = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            names = []
        for name in names:
            defined.setdefault(name, section_of(node.lineno))
    found = set()

    def walk(table, section: int) -> None:
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if symbol.is_global() and symbol.is_referenced() and defined.get(name, 0) > section:
                found.add((section, table.get_name(), name, defined[name]))
        for child in table.get_children():
            walk(child, section)

    for child in symtable.symtable(source, PROGRAM, "exec").get_children():
        walk(child, section_of(child.get_lineno()))
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and defined.get(sub.id, 0) > section_of(node.lineno):
                    found.add((section_of(node.lineno), "<module>", sub.id, defined[sub.id]))
    return sorted(found)


TEAM = os.path.join(os.path.dirname(PROGRAM), "durable_job_team")


@pytest.mark.parametrize("path", [PROGRAM, os.path.join(TEAM, "store.py")], ids=["durable_job.py", "store.py"])
def test_the_core_and_the_store_read_top_to_bottom_each_section_using_only_what_stands_above_it(path):
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    banners = sections(source.splitlines())
    assert [number for _, number, _ in banners] == list(range(1, len(banners) + 1)), "sections are numbered 1, 2, 3, … in order"
    header = source.split('"""', 2)[1]
    for _, number, title in banners:  # the file's docstring lists every section by its number and the title's first words
        assert re.search(rf"^\s*{number}\. {re.escape(title.split(':')[0].split(',')[0].split(' (')[0])}", header, re.M), (number, title)
    assert uses_from_below(source) == []


def test_the_check_finds_a_use_from_below():
    """The check itself: a function of section 1 that calls main() (section 18) and a constant built from a later one."""
    with open(PROGRAM, encoding="utf-8") as fh:
        source = fh.read()
    second = source.index("\n# 2. ")
    second = source.rindex("\n#####", 0, second)
    planted = source[:second] + "\n\ndef probe():\n    return main()\n\n\nPROBE = verify\n" + source[second:]
    assert [(s, where, name) for s, where, name, _ in uses_from_below(planted)] == [(1, "<module>", "verify"), (1, "probe", "main")]
    assert os.path.basename(PROGRAM) == "durable_job.py"


# The store's migrations as released: a changed file would change the schema of every store set up after it, while the
# stores set up before keep the old one under the same name. A change is a new migration, named in durable_job.py.
RELEASED_MIGRATIONS = {
    "m001_jobs": "42024ecc62e8a0489a59c94994f4c731a24c06d7ed53b90781435d02a5ea2b10",
    "m002_journal": "e4adfe08b9bf920c5193cdff0c6c3726b9d68cf8e98dab96687967b9e83d9229",
    "m003_identity": "5e4d828e266be06665b6427f3f5ed5fd6a1692978e2058a1e02fc8c9d5f9386f",
    "m004_policies": "5ea07a5b4a83235a84c69c961928146a11f76dcda9afa3aebf9efea9e07c7c0b",
    "m005_links": "a401a071c8cccb19905a1ec9d0e70307afcb63228ed9b8e80898ea8217bcc50e",
    "m006_link_policies": "d8d17224907ec05e28d4bc02cac019293e1626d164a4ec66dd098f1a6773d0e4",
    "m007_notify": "019b0cdece2764044492c8d15fc2a1508ed0e10eba77a23309ac21d397af3705",
    "m008_finished_mark": "57d1dac35c33ca423805ad12d8c9cc53627e7427bae496dff038fd349eb239b3",
    "m009_retention": "a4ae1db6b95062a9a43340d3de1362a590f2f7b77d48bd7bb6d7203fc004c90d",
    "m010_creation_order": "2fd2d2d0b800ee08d62bd50487d50933bcd40761ac3d868ebd128a618c4e3a78",
    "m011_hostile_roles": "aac079afb935846629d1ede81631bb88ffd1f67cb698691474bbfafca27414d7",
    "m012_passkeys": "c822086041471592ccf38555169db5281ea16da78ddc7878a7cf159b8ea2f975",
    "m013_holds": "1a2c214048a21a60501ec9ea250044d507d493ac0c7d39e1da68ec62ef3d2b42",
    "m014_outbox": "bc6deab567e96f3838612c7339eedc1e00e8e5493765aa6e05042d3d7d95ceff",
    "m015_sealed": "690c753c8c361896d043db195e7b285eb4ecb85624a3b3fa3582446fa826093b",
    "m016_floor": "55158b94ca4f11689742086b639e01236ef3c18d7e2aeb501643426decd4b402",
    "m017_changed_one": "293138783ff01e128e6f368a05d76acf1a8497b96ad1e3c75838f5595123b0ef",
    "m019_current_key": "231ccdf452c08fd1fe64e4b5db7c5c465b0cb6f2834ae2b2c0add8c748eaa062",
    "m020_outbox_stamped": "47e91e9a8c04c2d527df1a1e3a2c241ce984e1681401a435db59d7ec14d950ab",
    "m021_holds_links": "dabf12ccd58aa0588fe30e5c0a9e80413e527d6998ac98fc6234b5800724e9c1",
    "m022_passkey_origin": "8d60107e540b97c16f294e1e69bc2e63642c2febfbbb45f7fd75a652e0297975",
    "m023_engine_seal": "0aa543c569c810fdb439350566e131124b150a11f94cc4274c690aecb2f3f4cf",
    "m025_limits": "552b39be1ca7153f29e24c0f1954c0ddb485c96555e4ee75f8a9edccb5f40d39",
    "m026_submitted": "3de007d820be05d989e30294006ede12c95b69b83aa0aa3aafa126738cce2f92",
}


def test_the_stores_released_migrations_never_change_and_no_python_file_holds_its_sql():

    folder = team_store.STORE_MIGRATIONS_DIR
    on_disk = sorted(name.removesuffix(".sql") for name in os.listdir(folder) if name.endswith(".sql"))
    assert on_disk == sorted(team_store.PG_MIGRATIONS + team_store.PG_SETUP_MIGRATIONS), (
        "every migration file is applied, and every applied one is a file"
    )
    for name, digest in RELEASED_MIGRATIONS.items():
        with open(os.path.join(folder, f"{name}.sql"), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == digest, f"{name}.sql was released: write a new migration instead"
    for name, statements in team_store.store_migrations(team_store.PG_MIGRATIONS + team_store.PG_SETUP_MIGRATIONS):
        assert statements and all(s and not s.endswith(";") for s in statements), name
    root = os.path.dirname(PROGRAM)
    sources = [PROGRAM] + [
        os.path.join(root, "durable_job_team", f) for f in os.listdir(os.path.join(root, "durable_job_team")) if f.endswith(".py")
    ]
    for path in sources:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for sql in ("CREATE FUNCTION durable_job.", "CREATE OR REPLACE FUNCTION durable_job.", "CREATE POLICY", "CREATE TRIGGER"):
            assert sql not in text, f"{os.path.basename(path)} holds the store's SQL ({sql}): it belongs in a migration file"


# A state directory's migrations as released (durable_job.py's MIGRATIONS, SQL text in SQLite's dialect): the same rule.
RELEASED_SQLITE_MIGRATIONS = {
    "m001_calls": "2a122b36e012167d0a9243dc51a9149b06e70012f4de78bfd1c698ea1f419d8c",
    "m002_call_events": "40fbd2846b87058eb1d7a0e41e7dfcc4494032e7f1f2a04ae36e362931c77794",
    "m003_drafts": "3c34848218723c9e6289f20c05568f418172ddf0612052187c727a20c6ab6243",
    "m004_outcomes": "b0e43c47ed1f64be831cb31ce63897d732fea50c00c46867d8d3e9a874e61c78",
    "m005_principals": "e9addc1221191b3aca316b26bce147ac93c9528625725ddee420d1e64f4abcb1",
    "m006_decisions": "2374e501c57c9a845b1f705fe5a359dc4aa32cf667ab534385488ea0a2659bb2",
    "m007_links": "a7d5e649885d0d25167467e39870fdff4e549a7e1aa9ed63b9f8918b17f43226",
    "m008_passkeys": "ba6269ee7a660465c3ffd8693c28107e9113b59e6a07bcc7ec9db4cb11035259",
    "m009_holds": "d0b2bd780e3e159565d8dc353366d1c2a2f56fd08fe43f79a2a7c4f1dd752cde",
    "m010_outbox": "bca4ad79b78cbf0e54ed759c347f4828ba6a0d76e64aee7137bbeb5da1b50a6f",
    "m011_data_keys": "86bcc12f15ff4c90f2259554b8fe5653b0b546907ef9a3686def7f012fb54bdd",
    "m012_outbox_set_aside": "a0a7bb4390cabfb8f8a7db3a9be02a1acb57cd2f61d0be2a1a387ea07a5c2bd6",
    "m013_passkey_counts": "efc1c39d39340672494b1c4655439bccc12546802100d52de1e87adb86388e00",
}


def test_the_state_directorys_released_migrations_never_change_and_are_plain_sql():
    """Each is SQL as written (no Python builds it), applied in order, and its released text is pinned: a change to a
    table is a new migration appended to MIGRATIONS."""
    import durable_job as dj

    names = [name for name, _ in dj.MIGRATIONS]
    assert names == sorted(names) and names[: len(RELEASED_SQLITE_MIGRATIONS)] == list(RELEASED_SQLITE_MIGRATIONS)
    for name, sql in dj.MIGRATIONS[: len(RELEASED_SQLITE_MIGRATIONS)]:
        assert hashlib.sha256(sql.encode()).hexdigest() == RELEASED_SQLITE_MIGRATIONS[name], f"{name} was released: append a new one"
    with open(PROGRAM, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    (listed,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "MIGRATIONS"]
    for entry in listed.elts:
        assert all(isinstance(part, ast.Constant) for part in entry.elts), f"{ast.unparse(entry)[:60]}: write it as SQL text"


def test_a_migration_file_is_split_into_statements_as_postgresql_reads_it():

    text = (
        "-- m999: a note; with a semicolon\n\nCREATE TABLE t (a text DEFAULT 'x;''y');\n\n"
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$;\n"
        "-- a comment ; between\nDO $body$ BEGIN PERFORM 1; END $body$"
    )
    assert team_store.sql_statements(text) == [
        "CREATE TABLE t (a text DEFAULT 'x;''y')",
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN 1; END $$",
        "DO $body$ BEGIN PERFORM 1; END $body$",
    ]


def test_every_column_of_a_chained_table_is_chained_or_declared_not_on_both_backends(tmp_path, store_url):
    """A new column is chained on purpose (named in CHAIN_COLUMNS) or declared a row's place or the server's clock
    (UNCHAINED_COLUMNS): a migration that adds one without deciding fails here, not in a later verify."""
    import psycopg

    import durable_job as dj
    from conftest import admin_url

    conn = dj.ledger(str(tmp_path / "effects.sqlite"))
    try:
        sqlite_columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in dj.CHAIN_COLUMNS}
    finally:
        conn.close()
    with psycopg.connect(admin_url(store_url)) as pg:
        store_columns = {
            t: {
                r[0]
                for r in pg.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = 'durable_job' AND table_name = %s", (t,)
                )
            }
            for t in dj.CHAIN_COLUMNS
        }
    for table, chained in dj.CHAIN_COLUMNS.items():
        for backend, columns in (("state directory", sqlite_columns[table]), ("store", store_columns[table])):
            assert set(chained) <= columns, (backend, table, set(chained) - columns)
            assert columns - set(chained) <= dj.UNCHAINED_COLUMNS, (
                f"{backend} {table}: {columns - set(chained)} neither chained nor declared"
            )


def test_a_link_binds_only_its_tables_named_columns():
    import durable_job as dj

    row = {c: n for n, c in enumerate(dj.CHAIN_COLUMNS["outcomes"])} | {"job_id": "j", "recorded_at": "now", "added_later": "x"}
    assert dj.chain_record("outcomes", row) == {c: str(n) for n, c in enumerate(dj.CHAIN_COLUMNS["outcomes"])}


def test_the_core_alone_runs_a_state_directory_job_without_the_teams_parts(tmp_path):
    """durable_job.py copied alone (no durable_job_team beside it), in a Python where the team's and the optional
    libraries cannot be imported: a state-directory job runs, is decided and verifies; --version says what it seals."""
    import shutil

    from conftest import Result, Workspace, run_alone

    alone = tmp_path / "alone"
    alone.mkdir()
    program = str(alone / "durable_job.py")
    shutil.copy(PROGRAM, program)
    ws = Workspace(tmp_path / "job")
    ws.write_manifest()

    def run(*args) -> Result:
        return run_alone(program, args, str(alone))

    assert run("start", "--manifest", ws.manifest, "--state-dir", ws.state).ok()["interrupt"]
    digest = run("inspect", "--state-dir", ws.state).ok()["resultsSha256"]
    decided = run(
        "decide", "--state-dir", ws.state, "--decision", "accept", "--reviewer", "r", "--reason", "alone", "--results-sha256", digest
    )
    assert decided.ok()["final"]["decision"] == "accept"
    assert run("verify", "--state-dir", ws.state).code == 0
    version = run("--version")
    assert version.code == 0 and "engine sha256" in version.stdout and "durable_job_team" not in version.stdout
    refused = run("status", "--store", "postgresql://alice@localhost/jobs", "--job", "x")
    assert (
        refused.code == 2
        and "a --store (the team's PostgreSQL store) needs durable_job_team/, the team's package, which is not beside this durable_job.py"
        in refused.stderr
    )
    served = run("serve", "--root", str(tmp_path))  # a team command: named as no command of the file alone, with the way to get it
    assert served.code == 2 and "invalid choice: 'serve'" in served.stderr and "needs durable_job_team/" in served.stderr
    assert run("frobnicate").held("invalid choice: 'frobnicate'")  # a typo is still a typo


def test_no_function_of_the_program_is_longer_than_80_lines():
    files = [PROGRAM] + [os.path.join(TEAM, f) for f in sorted(os.listdir(TEAM)) if f.endswith(".py")]
    long = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append((os.path.basename(path), node.name, node.end_lineno - node.lineno + 1))
    assert len(files) == 7 and long == []  # the core, __init__, cli, notify, store, web, workers


# One word, one meaning (issue 46): "seal" is a sha256 pin (a manifest's pins, the `seal` command, sealing a job,
# SealError); encryption at rest is "encrypt". Its old names, which mean encryption under "seal":
OLD_ENCRYPTION_NAMES = re.compile(
    r"\b[Ss]eal(?:ed|ing) at rest\b|\bSealer\b|\bsealer\w*|\w*_sealer\b|\bSealedError\b|\bSealedSerializer\b|\bis_sealed\b"
    r"|\bSEALED_(?:PREFIX|CHECKPOINT_TAG|DOCUMENT|KEYS|TABLES?|SIGNATURES)\b|\bsealingTurnedOn\b|\b(?:start|mark)_sealing\b"
    r"|\bsealing_(?:since|words)\b|\b(?:shred|verify|start)_sealed\b|\bsealed_(?:document|source|pruned|checkpoint)\b"
    r"|\bjournal\.sealed\(|\bself\.sealing\b|sealedAtRest"
)
# where a released format keeps an old name byte for byte: the document field's constant, and a line that says so
KEEPS_AN_OLD_NAME = ('ENCRYPTED_DOCUMENT_FIELD = "sealedAtRest"', "old name")


def old_encryption_names(text: str) -> list:
    """(line number, the old name) of each name that means encryption under "seal", outside the lines that keep one."""
    return [
        (n, m.group(0))
        for n, line in enumerate(text.splitlines(), 1)
        if not any(kept in line for kept in KEEPS_AN_OLD_NAME)
        for m in OLD_ENCRYPTION_NAMES.finditer(line)
    ]


def test_seal_means_a_pin_and_encryption_at_rest_is_called_encrypt_wherever_a_person_or_a_reader_meets_it():
    """The code, the team's package (its templates too), the docs and the tests never say "seal" for encryption; the
    released bytes keep their names (a receipt's field, the ciphertext's prefix and tag, the associated data)."""
    repo = os.path.dirname(os.path.abspath(PROGRAM))
    paths = [PROGRAM, os.path.join(repo, "README.md"), os.path.join(repo, "conftest.py")]
    for folder, ext in (("durable_job_team", ".py"), ("durable_job_team/templates", ".html"), ("docs", ".md"), ("tests", ".py")):
        paths += [os.path.join(repo, folder, f) for f in sorted(os.listdir(os.path.join(repo, folder))) if f.endswith(ext)]
    found = {}
    for path in paths:
        if os.path.basename(path) != "test_house.py":  # this file names the old names to find them
            with open(path, encoding="utf-8") as fh:
                found.update({f"{os.path.relpath(path, repo)}:{n}": name for n, name in old_encryption_names(fh.read())})
    assert found == {}, f"encryption at rest is called 'encrypt' ('seal' is a sha256 pin): {found}"
    # the check finds each shape the code had, and leaves the pinning meaning alone
    before = "\n".join(
        [
            "class Sealer:",  # an old name
            '    raise SealedError(f"job {j} is sealed at rest")',  # old names
            "sealer_of=self.sealer",  # old names
            "if is_sealed(v):",  # an old name
            'out["sealingTurnedOn"]',  # an old name
        ]
    )
    assert [n for n, _ in old_encryption_names(before)] == [1, 2, 2, 3, 3, 4, 5]
    assert old_encryption_names('raise SealError("Engine changed: job J was sealed by engine E")\nsealed_manifest(job)') == []
    import durable_job as dj

    released = ("sealedAtRest", "dj-enc:v1:", "dj-enc-v1+")  # the field's old name, the prefix, the tag: kept
    assert released == (dj.ENCRYPTED_DOCUMENT_FIELD, dj.ENCRYPTED_PREFIX, dj.ENCRYPTED_CHECKPOINT_TAG)
    assert dj.Cipher("j", None).bound("t", "r", "c") == dj.canonical(["durable_job sealed value", "j", "t", "r", "c"])
