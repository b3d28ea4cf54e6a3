"""The house (issue 31): durable_job.py reads top to bottom in numbered sections, each using only what stands above it."""

import ast
import os
import re
import symtable

from conftest import PROGRAM

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


def test_durable_job_reads_top_to_bottom_each_section_using_only_what_stands_above_it():
    with open(PROGRAM, encoding="utf-8") as fh:
        source = fh.read()
    banners = sections(source.splitlines())
    assert [number for _, number, _ in banners] == list(range(1, len(banners) + 1)), "sections are numbered 1, 2, 3, … in order"
    header = source.split('"""', 2)[1]
    for _, number, title in banners:  # the file's docstring lists every section by its number and the title's first words
        assert re.search(rf"^\s*{number}\. {re.escape(title.split(':')[0].split(',')[0].split(' (')[0])}", header, re.M), (number, title)
    assert uses_from_below(source) == []


def test_the_check_finds_a_use_from_below():
    """The check itself: a function of section 1 that calls main() (section 20) and a constant built from a later one."""
    with open(PROGRAM, encoding="utf-8") as fh:
        source = fh.read()
    second = source.index("\n# 2. ")
    second = source.rindex("\n#####", 0, second)
    planted = source[:second] + "\n\ndef probe():\n    return main()\n\n\nPROBE = verify\n" + source[second:]
    assert [(s, where, name) for s, where, name, _ in uses_from_below(planted)] == [(1, "<module>", "verify"), (1, "probe", "main")]
    assert os.path.basename(PROGRAM) == "durable_job.py"
