"""Test plans: how a test specification (HumanEval's `check`, MBPP's asserts) becomes tests the harness runs one
by one, each reporting its own verdict (partial credit)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from .harness import STANDARD_MODULES
from .types import TestSpec

# Names the generated test code uses (chosen so that they do not collide with a program's names).
_TESTS_FN = "_trl_marl_tests_"
_RECORD = "_trl_marl_record_"
_EQ = "_trl_marl_eq_"
_EXC = "_trl_marl_exc_"


# ---------------------------------------------------------------------------------------------------- test plans
@dataclass(frozen=True)
class TestPlan:
    """What the harness runs after the program: `setup` at module level, then the function `_TESTS_FN` defined by
    `tests_fn`, which reports each of the `len(sources)` tests through its first argument."""

    setup: str
    tests_fn: str
    sources: tuple[str, ...]
    entry_point: str | None = None
    modules: tuple[str, ...] = ()
    """Standard modules the tests read by name (`math` in `math.isclose(...)`): the harness binds the real module
    to these names whatever the program binds to them (see [`modules_read`])."""


class _EqAsserts(ast.NodeTransformer):
    """Rewrites `assert a == b` (no message) as `_EQ(a, b)`, which raises `AssertionError("got .., expected ..")`:
    same evaluation order and truth test, and an informative message for feedback."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = node.test
        if (node.msg is None and isinstance(test, ast.Compare) and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Eq)):
            call = ast.Call(func=ast.Name(_EQ, ast.Load()), args=[test.left, test.comparators[0]], keywords=[])
            return ast.copy_location(ast.Expr(call), node)
        return node


def modules_read(codes: Sequence[str], entry_point: str | None = None) -> tuple[str, ...]:
    """The names of standard modules (every top-level one, `sys.stdlib_module_names`: the harness's
    `STANDARD_MODULES`) that the test code reads only as modules, i.e. only as `name.attribute`: what the test's
    author meant by them is the module the reference solution imported, never whatever a program binds to that name.
    A name the tests also call or pass as a value (`copy(x)`) is a function under test, as is the entry point.

    Args:
        codes (`Sequence[str]`): Test code (setup, asserts or HumanEval's `check`); code that does not parse reads
            nothing.
        entry_point (`str`, *optional*): The function under test, never a module.

    Returns:
        `tuple[str, ...]`: The names, sorted.
    """
    bases: set[str] = set()
    other: set[str] = set()
    for code in codes:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        values = [node.value for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)]
        as_base = {id(node) for node in values}
        bases.update(node.id for node in values)
        other.update(node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in as_base)
    return tuple(sorted((bases - other) & (STANDARD_MODULES - {entry_point})))


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _walk_body(node: ast.AST) -> list[ast.AST]:
    """The nodes of `node` that run when it runs: function and lambda bodies excluded (a definition runs only its
    decorators and defaults; a class body runs)."""
    found: list[ast.AST] = []
    todo = [node]
    while todo:
        current = todo.pop()
        found.append(current)
        if isinstance(current, _NESTED):
            todo.extend(current.args.defaults + [d for d in current.args.kw_defaults if d is not None])
            if not isinstance(current, ast.Lambda):
                todo.extend(current.decorator_list)
            continue
        todo.extend(ast.iter_child_nodes(current))
    return found


def _asserts_or_raises(node: ast.AST, helpers: frozenset[str]) -> bool:
    """Whether running `node` can fail a test by itself: it asserts something (`assert True, "..."` does not count),
    raises, or calls one of the test code's own `helpers` (functions that assert or raise)."""
    for n in _walk_body(node):
        if isinstance(n, ast.Assert) and not (isinstance(n.test, ast.Constant) and n.test.value):
            return True
        if isinstance(n, ast.Raise):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers:
            return True
    return False


def _failing_helpers(scopes: Sequence[Sequence[ast.stmt]]) -> frozenset[str]:
    """Names of the functions defined at the top of `scopes` (the test module, `check`'s body) that assert or raise,
    directly or through another such function (`def t(args, want): assert c(*args) == want`)."""
    defs = {stmt.name: stmt for body in scopes for stmt in body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
    helpers: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, node in defs.items():
            if name not in helpers and any(_asserts_or_raises(s, frozenset(helpers)) for s in node.body):
                helpers.add(name)
                changed = True
    return frozenset(helpers)


def _record_call(index: int, value: ast.expr) -> ast.stmt:
    return ast.Expr(ast.Call(func=ast.Name(_RECORD, ast.Load()), args=[ast.Constant(index), value], keywords=[]))


def _guarded(index: int, body: list[ast.stmt]) -> ast.Try:
    """`try: <body> except Exception as e: record(index, e) else: record(index, None)`."""
    handler = ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=_EXC,
                                body=[_record_call(index, ast.Name(_EXC, ast.Load()))])
    return ast.Try(body=body or [ast.Pass()], handlers=[handler], orelse=[_record_call(index, ast.Constant(None))],
                   finalbody=[])


def _tests_function(body: list[ast.stmt]) -> str:
    module = ast.parse(f"def {_TESTS_FN}({_RECORD}, {_EQ}):\n    pass\n")
    module.body[0].body = body  # type: ignore[attr-defined]
    return ast.unparse(ast.fix_missing_locations(module))


def _segment(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    return " ".join(text.split()) if "\n" not in text.strip() else text.strip()


def _task_setup(task_code: str) -> str:
    """The task's own definitions as set-up code: each top-level statement on its own, one that fails skipped."""
    try:
        tree = ast.parse(task_code)
    except SyntaxError:
        return ""
    handler = ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=None, body=[ast.Pass()])
    body: list[ast.stmt] = [ast.Try(body=[stmt], handlers=[handler], orelse=[], finalbody=[]) for stmt in tree.body]
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))) + "\n" if body else ""


def _humaneval_plan(spec: TestSpec) -> TestPlan:
    code, entry = str(spec.check_code), str(spec.entry_point)
    task = _task_setup(spec.task_code)
    check: ast.FunctionDef | None = None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "check":
                check = node
    args = check.args if check is not None else None
    simple = (args is not None and len(args.args) == 1 and not args.posonlyargs and not args.kwonlyargs
              and args.vararg is None and args.kwarg is None)
    if spec.split and check is not None and tree is not None and simple:
        helpers = _failing_helpers([tree.body, check.body])
        tests = [i for i, stmt in enumerate(check.body) if _asserts_or_raises(stmt, helpers)]
        if tests:
            # Every statement of `check` belongs to one test: the statements before a test (set-up, helper
            # definitions, calls that assert nothing visibly) to it, those after the last test to the last one. So a
            # failure anywhere in `check` fails a test, as it would fail `check(candidate)` itself.
            param = check.args.args[0].arg
            body: list[ast.stmt] = [ast.Assign(targets=[ast.Name(param, ast.Store())],
                                               value=ast.Name(entry, ast.Load()))]
            sources: list[str] = []
            start = 0
            for number, index in enumerate(tests):
                end = index + 1 if number < len(tests) - 1 else len(check.body)
                group = [_EqAsserts().visit(stmt) for stmt in check.body[start:end]]
                body.append(_guarded(len(sources), group))
                sources.append(_segment(code, check.body[index]))
                start = end
            return TestPlan(setup=task + code, tests_fn=_tests_function(body), sources=tuple(sources),
                            entry_point=entry, modules=modules_read([code], entry))
    call = ast.Expr(ast.Call(func=ast.Name("check", ast.Load()), args=[ast.Name(entry, ast.Load())], keywords=[]))
    return TestPlan(setup=task + code, tests_fn=_tests_function([_guarded(0, [call])]),
                    sources=(f"check({entry})",), entry_point=entry, modules=modules_read([code], entry))


def _mbpp_plan(spec: TestSpec) -> TestPlan:
    body: list[ast.stmt] = []
    sources: list[str] = []
    for index, test in enumerate(spec.asserts):
        try:
            stmts = [_EqAsserts().visit(s) for s in ast.parse(test).body]
        except SyntaxError as exc:
            message = ast.Constant(f"the test does not parse: {exc.msg}")
            stmts = [ast.Raise(exc=ast.Call(func=ast.Name("SyntaxError", ast.Load()), args=[message], keywords=[]))]
        body.append(_guarded(index, stmts))
        sources.append(" ".join(test.split()) if "\n" not in test.strip() else test.strip())
    if not spec.asserts:
        body.append(_guarded(0, [ast.Pass()]))
        sources.append("(the program runs without an error)")
    return TestPlan(setup=spec.setup_code, tests_fn=_tests_function(body), sources=tuple(sources),
                    modules=modules_read([spec.setup_code, *spec.asserts]))


def make_plan(spec: TestSpec) -> TestPlan:
    return _humaneval_plan(spec) if spec.check_code is not None else _mbpp_plan(spec)


