"""Objects built whole (issue 46): a Journal receives what it works with (its job, principal, secrets, the writes of
its job's chain and notifications, how to find its Cipher, whether it opens encrypted values, verify's unread set) when
it is made, and nothing outside its own class's methods sets an attribute of one afterwards. The Store interface is
two: what a job's run needs (RunStore, in the engine) and administration (AdminStore, below the engine's mark), both
implemented by the state directory's store and by a team's PostgreSQL store.

These are architecture tests, read from the code itself (an AST walk); each first shows its walk finds what it forbids.
"""

import ast
import os

import durable_job as dj
from conftest import ENGINE_MARK, PROGRAM, STORE_PY, through_mark
from durable_job_team import store as team_store

TEAM = os.path.dirname(STORE_PY)
JOURNAL_TYPES = {"Journal", "SqliteJournal", "PgJournal"}
# Calls whose answer is a journal (a store's journal, its read journal, a read connection's, one made outright).
JOURNAL_CALLS = {"journal", "read_journal", "db", "writer_of", "SqliteJournal", "PgJournal", "as_journal", "read_journal_plain"}
# Attributes of another object that hold a journal (a run's context's, a store's writer and reader).
JOURNAL_ATTRIBUTES = {"journal", "writer", "reader"}


def sources() -> dict:
    """{path: parsed module} of the core and every module of the team's package."""
    paths = [PROGRAM] + [os.path.join(TEAM, name) for name in sorted(os.listdir(TEAM)) if name.endswith(".py")]
    parsed = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            parsed[path] = ast.parse(fh.read(), path)
    return parsed


def journal_classes(modules) -> dict:
    """{name: class node} of Journal and every class that derives from one (across the modules given), and of Writes,
    the part a journal is given of its job (built whole likewise)."""
    classes = {n.name: n for tree in modules for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    found = {name: node for name, node in classes.items() if name in ("Journal", "Writes")}  # Writes: made whole with it
    grew = True
    while grew:
        grew = False
        for name, node in classes.items():
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if name not in found and bases & set(found):
                found[name], grew = node, True
    return found


def own_attributes(classes: dict) -> set:
    """Every attribute a Journal class sets on itself (`self.NAME = …` in its methods) or defines (a property)."""
    names = set()
    for node in classes.values():
        for inner in ast.walk(node):
            if isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store) and isinstance(inner.value, ast.Name):
                names.add(inner.attr) if inner.value.id == "self" else None
            elif isinstance(inner, ast.FunctionDef) and any(getattr(d, "id", "") == "property" for d in inner.decorator_list):
                names.add(inner.name)
    return names


def annotated_journal(annotation) -> bool:
    """Whether a parameter's annotation names a journal type (Journal, `PgJournal | None`, "Journal")."""
    if annotation is None:
        return False
    text = annotation.value if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str) else ast.unparse(annotation)
    return bool(set(text.replace("|", " ").replace('"', " ").split()) & JOURNAL_TYPES)


def journal_names(function) -> set:
    """The local names a function holds a journal in: parameters typed as one, names assigned a journal's call."""
    arguments = function.args
    names = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs if annotated_journal(a.annotation)}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and holds_journal(node.value, names):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in (target.elts if isinstance(target, ast.Tuple) else [target]) if isinstance(n, ast.Name)}
    return names


def holds_journal(value, names: set) -> bool:
    """Whether an expression's value is a journal: a journal's call (unwrapped from a cast), a store's or context's."""
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "cast" and value.args:
        return holds_journal(value.args[1], names)
    if isinstance(value, ast.IfExp):
        return holds_journal(value.body, names) or holds_journal(value.orelse, names)
    if isinstance(value, ast.BoolOp):
        return any(holds_journal(v, names) for v in value.values)
    if isinstance(value, ast.Call):
        func = value.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in JOURNAL_CALLS
    if isinstance(value, ast.Attribute):
        return value.attr in JOURNAL_ATTRIBUTES
    return isinstance(value, ast.Name) and value.id in names


def pokes(modules: dict, attributes: set) -> list:
    """Each `X.attr = …` (or augmented, or in a tuple) that sets an attribute of a journal from outside its class's
    methods: X a journal (by the names above) whatever attr, or any X but `self` when attr is a journal's alone."""
    classes = journal_classes(modules.values())
    found = []
    for path, tree in modules.items():
        inside = {id(n) for c in classes.values() for n in ast.walk(c)}
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            held = journal_names(function)
            for node in ast.walk(function):
                if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Store) or id(node) in inside:
                    continue
                receiver = node.value
                is_journal = (isinstance(receiver, ast.Name) and receiver.id in held) or (
                    isinstance(receiver, ast.Attribute) and receiver.attr in JOURNAL_ATTRIBUTES
                )
                is_self = isinstance(receiver, ast.Name) and receiver.id == "self"
                if is_journal or (not is_self and node.attr in attributes):
                    found.append(f"{os.path.basename(path)}:{node.lineno}: {ast.unparse(node)} =")
    return sorted(set(found))


def journal_only(modules: dict) -> set:
    """A journal's attributes that no other class of these modules sets on itself (so any object's is a journal's)."""
    classes = journal_classes(modules.values())
    others = {n.name: n for tree in modules.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name not in classes}
    return own_attributes(classes) - own_attributes(others)


def test_the_walk_finds_each_way_a_journal_was_poked():
    """The walk below is not blind: each shape of poke the code had before issue 46 is found in a module that does it."""
    before = """
def attach(store, job):
    journal = store.journal(seal_link)
    journal.notices = Notices(job)
    journal.chained = chained(job)

def prefetch(ctx):
    journal = ctx.store.journal()
    journal.chained, journal.notices = ctx.journal.chained, ctx.journal.notices

def verify_encrypted(store):
    journal = store.read_journal()
    if journal is not None:
        journal.unread = set()

def shred_key(store, journal: "Journal", job):
    journal.cipher, journal.chained = None, chained(job)

class PgStore:
    def db(self):
        self.writer.cipher_of = self.cipher
        self.reader.cipher_of = self.cipher

def store_page(lister):
    db = lister.db()
    db.opens = False

def store_limits(target):
    db = target.db()
    db.principal = target.principal()

def take(writer: PgJournal | None):
    writer.lock_pid = 1
"""
    modules = {**sources(), "before.py": ast.parse(before)}
    found = [p for p in pokes(modules, journal_only(modules)) if p.startswith("before.py:")]
    assert len(found) == 12, found


def test_nothing_sets_an_attribute_of_a_journal_outside_its_own_class():
    """A Journal is built whole: what it works with is given when it is made (Journal.__init__), and its own state (its
    transaction, the chain's head and results it remembers, its claims, a writer's lock) is set by its own methods."""
    modules = sources()
    attributes = journal_only(modules)
    assert {"writes", "chained", "notices", "cipher_of", "opens", "unread", "head", "lock_pid"} <= attributes
    assert pokes(modules, attributes) == []


def test_a_journal_is_made_with_what_it_works_with():
    """The collaborators are constructor parameters, and the cipher is found through the one given (never set)."""
    secrets, unread = dj.Secrets(), set()
    writes = dj.Writes(True, None)
    journal = dj.SqliteJournal(
        dj.sqlite3.connect(":memory:"),
        principal="ana",
        secrets=secrets,
        writes=writes,
        cipher_of=lambda j: None,
        opens=False,
        unread=unread,
    )
    try:
        assert (journal.principal, journal.secrets, journal.writes, journal.chained, journal.opens, journal.unread) == (
            "ana",
            secrets,
            writes,
            True,
            False,
            unread,
        )
        assert journal.cipher is None and journal.notices is None
    finally:
        journal.close()


def members(cls) -> set:
    """The methods and attributes a class itself declares (not those it inherits)."""
    return {name for name in vars(cls) if not name.startswith("__") or name in ("__enter__", "__exit__")}


def store_uses(source: str) -> set:
    """Every attribute the code reads of a store: `store.X`, `ctx.store.X`, `self.store.X`, and of the stores a command
    names (`before.X`, `other.X`, `named.X`, a lister's, a target's). A store class's own methods are checked by what the
    engine's classes have (below)."""
    names = {"store", "before", "other", "named", "lister", "one", "target"}
    used = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            receiver = node.value
            if (isinstance(receiver, ast.Name) and receiver.id in names) or (
                isinstance(receiver, ast.Attribute) and receiver.attr == "store"
            ):
                used.add(node.attr)
    return used


def test_the_run_needs_only_the_run_interface_and_administration_stands_outside_the_engine():
    """Store (section 11, in the engine) is what a job's run needs; AdminStore, defined below the engine's mark, adds
    administration, and nothing in either engine (the core's, a store's) reads one of its methods: the engines' own
    stores (StateDirRunStore, PgRunStore) do not have them. Both stores a command opens implement both interfaces."""
    admin = members(dj.AdminStore) - members(dj.Store)
    assert {"passkey_rows", "add_passkey", "count_passkey", "mark_pruned", "drop_checkpoints", "checkpoint_bytes"} <= admin
    assert {"secure_writes", "scrub_freed", "check_whole"} <= admin and not admin & members(dj.Store)
    for engine in (through_mark(PROGRAM).decode(), through_mark(STORE_PY).decode()):
        assert "class AdminStore" not in engine
        assert store_uses(engine) & admin == set(), sorted(store_uses(engine) & admin)
    core = store_uses(through_mark(PROGRAM).decode())
    assert core and core <= set(dir(dj.Store)) | set(dj.Store.__annotations__), sorted(core - set(dir(dj.Store)))  # the run's own
    assert store_uses("def f(store):\n    store.check_whole()\n") & admin == {"check_whole"}  # the walk sees a use
    for run_part in (dj.StateDirRunStore, team_store.PgRunStore):
        assert not any(hasattr(run_part, name) for name in admin), run_part
    for opened in (dj.StateDirStore, team_store.PgStore):
        assert issubclass(opened, dj.AdminStore) and issubclass(opened, dj.Store) and not opened.__abstractmethods__
    with open(PROGRAM, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    mark = lines.index(ENGINE_MARK)
    assert lines.index("class AdminStore(Store):") > mark and lines.index("class Store(abc.ABC):") < mark
