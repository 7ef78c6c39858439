"""Hostile expression-language inputs: every one is rejected with a ValueError (a 422 `target_invalid` through
`validate_job_spec`), in bounded time, and nothing touches the filesystem, processes or the interpreter.

Time bounds are enforced by pytest-timeout (a hang fails the test), not by timing assertions.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

from inference_core import errors
from inference_core.expression import MAX_DEPTH, MAX_NODES, MAX_SOURCE_LENGTH
from inference_core.expression.compiler import compile_expression
from inference_core.expression.parser import PARSE_FILENAME, parse_expression
from inference_core.spec import validate_job_spec
from inference_core.targets import build_target

DIM = 2
PARAMS = {"mu": [1.0, 2.0, 3.0], "s": 2.0, "A": [[1.0, 0.0], [0.0, 1.0]]}
PARAM_SHAPES = {"mu": (3,), "s": (), "A": (2, 2)}

# (payload, a fragment the error message must contain)
HOSTILE: list[tuple[str, str]] = [
    ("x.__class__", "col 1: attribute access is not allowed"),
    ("x.__class__.__mro__[1].__subclasses__()", "attribute access"),
    ("sum(x).real", "attribute access"),
    ("__import__('os').system('true')", "attribute access"),
    ("__import__('os')", "calling '__import__' is not allowed"),
    ("open('/etc/passwd')", "calling 'open' is not allowed"),
    ("eval('1')", "calling 'eval' is not allowed"),
    ("exec('1')", "calling 'exec' is not allowed"),
    ("compile('1', 'f', 'eval')", "calling 'compile' is not allowed"),
    ("getattr(x, 'shape')", "calling 'getattr' is not allowed"),
    ("globals()", "calling 'globals' is not allowed"),
    ("breakpoint()", "calling 'breakpoint' is not allowed"),
    ("__builtins__", "names starting with '_' are not allowed"),
    ("_secret + 1", "names starting with '_' are not allowed"),
    ("sum(x)()", "only functions from the fixed list may be called"),
    ("x(1)", "'x' is not a function"),
    ("pi()", "'pi' is not a function"),
    ("foo(x)", "calling 'foo' is not allowed"),
    ("y + 1", "unknown name 'y'"),
    ("exp", "exp is a function"),
    ("lambda: 0", "lambda is not allowed"),
    ("(lambda: 0)()", "only functions from the fixed list may be called"),
    ("sum([v for v in x])", "comprehensions are not allowed"),
    ("sum({v: v for v in x})", "comprehensions are not allowed"),
    ("sum(v for v in x)", "comprehensions are not allowed"),
    ("9**9**9", "exponent of ** must be a number literal"),
    ("2**1000", "exponent 1000 is out of range"),
    ("x[0]**17", "exponent 17 is out of range"),
    ("x[0]**-16.5", "out of range"),
    ("2**x[0]", "exponent of ** must be a number literal"),
    ("x[0]**s", "exponent of ** must be a number literal"),
    ("x[0]**(1/3)", "exponent of ** must be a number literal"),
    ("x[0]**1e999", "out of range"),
    ("1e999 + x[0]", "number literals must be finite"),
    ("9" * 400 + " + x[0]", "number literals must be finite"),
    ("9" * 5000, "syntax error"),
    ("sum(x, start=1)", "keyword arguments are not allowed"),
    ("exp(*x)", "* unpacking is not allowed"),
    ("'abc'", "strings are not allowed"),
    ("b'abc'", "strings are not allowed"),
    ("f'{x}'", "f-strings are not allowed"),
    ("len('a' * 10**9)", "calling 'len'"),
    ("None", "only numbers"),
    ("True + x[0]", "only numbers"),
    ("...", "only numbers"),
    ("1j + x[0]", "only numbers"),
    ("x[0] if x[1] > 0 else 1", "use where(cond, a, b)"),
    ("(y := 1)", "assignment expressions"),
    ("x[0] and x[1]", "and/or are only allowed"),
    ("not x[0]", "'not' is only allowed"),
    ("~x[0]", "'~' is only allowed"),
    ("x[0] < x[1]", "comparisons are only allowed as the condition"),
    ("where(x[0], 1, 2)", "the condition of where() must be a comparison"),
    ("where(x[0] in x, 1, 2)", "comparison operator In is not allowed"),
    ("where(x[0] is x[1], 1, 2)", "comparison operator Is is not allowed"),
    ("x[0] % 2", "operator '%' is not allowed"),
    ("x[0] // 2", "operator '//' is not allowed"),
    ("x[0] << 1", "operator '<<' is not allowed"),
    ("x[0] ^ 1", "operator '^' is not allowed"),
    ("x[0] & x[1]", "'&' is only allowed in the condition"),
    ("[x[0]]", "list literals are not allowed"),
    ("(x[0], x[1])", "tuples are not allowed"),
    ("{x[0]}", "set literals are not allowed"),
    ("{1: 2}", "dict literals are not allowed"),
    ("x[100]", "index 100 is out of range for x of length 2"),
    ("x[-3]", "index -3 is out of range for x of length 2"),
    ("x[10**30]", "indices of x must be integer literals"),
    ("x[" + "9" * 300 + "]", "out of range"),
    ("mu[3]", "index 3 is out of range for param 'mu' of length 3"),
    ("mu[-4]", "out of range"),
    ("A[0, 2]", "index 2 is out of range"),
    ("A[2][0]", "only x and params can be subscripted"),
    ("s[0]", "param 's' is a scalar and cannot be subscripted"),
    ("x[1.5]", "indices of x must be integer literals"),
    ("x[mu[0]]", "indices of x must be integer literals"),
    ("x[True]", "indices of x must be integer literals"),
    ("sum(x[0:2:0])", "slice step must not be zero"),
    ("sum(x[1:1])", "the slice of x is empty"),
    ("sum(x[0:s])", "slice bounds of x must be integer literals"),
    ("sum(x)[0]", "only x and params can be subscripted"),
    ("x[0, 1]", "needs a matrix and two indices"),
    ("sum(A)", "sum() reduces a vector but got a 2x2 matrix"),
    ("A + 1", "must give one number per particle but gives a 2x2 matrix"),
    ("A @ A", "@ cannot combine"),
    ("sum(x + mu)", "shape mismatch in +/-: a vector of length 2 and a vector of length 3"),
    ("x", "must give one number per particle but gives a vector of length 2"),
    ("sum(x[0])", "sum() reduces a vector but got a scalar"),
    ("exp(x[0], 1)", "exp takes 1 argument, got 2"),
    ("max(x[0], x[1])", "use maximum(a, b) elementwise"),
    ("log_normal(x[0], 0)", "log_normal takes 3 arguments, got 2"),
    ("dot(x, mu)", "dot() needs two vectors of equal length"),
    ("", "empty"),
    ("   ", "empty"),
    ("x[0] +", "syntax error"),
    ("import os", "syntax error"),
    ("x[0]; x[1]", "syntax error"),
    ("x[0]\nimport os", "syntax error"),
    ("\x00", "NUL"),
    ("x[0] + \u00e9", "ASCII"),
    ("\uff58[0]", "ASCII"),  # fullwidth x, which Python would NFKC-normalise to x
    ("-(" * 100 + "x[0]" + ")" * 100, f"nested more than {MAX_DEPTH} levels"),
    ("(" * 250 + "x[0]" + ")" * 250, "too many nested parentheses"),
    ("-(" * 3000 + "x[0]" + ")" * 3000, "syntax error"),
    ("-" * 9000 + "x[0]", "nested too deeply"),
    ("exp(" * 100 + "x[0]" + ")" * 100, f"nested more than {MAX_DEPTH} levels"),
    ("(" * 190 + "x[0]" + ")**2" * 190, f"nested more than {MAX_DEPTH} levels"),
    ("x[0]" + "**2" * 2000, f"nested more than {MAX_DEPTH} levels"),  # right-nested: 2 ** (2 ** ...)
    ("(" * 190 + "x[0]" + ")@A" * 190, f"nested more than {MAX_DEPTH} levels"),
    ("+".join(["(" + "+".join(["e"] * 98) + ")"] * 50), f"more than {MAX_NODES} syntax nodes"),
    ("(" * 10_000 + "1" + ")" * 10_000, f"longer than {MAX_SOURCE_LENGTH}"),
    ("-(" * 10_000 + "1" + ")" * 10_000, f"longer than {MAX_SOURCE_LENGTH}"),
    ("1" * 1_000_000, f"longer than {MAX_SOURCE_LENGTH}"),
    ("x[0]+" * 250_000 + "1", f"longer than {MAX_SOURCE_LENGTH}"),
]

VALID: list[str] = [
    "-0.5*sum((x - mu[0:2])**2 / s**2) + log(1 + x[0]**2)",
    "where((x[0] > 0) & (x[1] < 1), log_normal(x[0], 0, 1), -x[0]**2)",
    "logsumexp(A @ x) - 0.5 * dot(x, x)",
    "-norm(x[::-1] - A[1]) + log_student_t(x[1], 3, 0, s)",
    "1.5",
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("source", "fragment"), HOSTILE, ids=lambda v: repr(v)[:40] if isinstance(v, str) else v
)
def test_hostile_source_is_rejected_by_the_parser(source: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_expression(source, DIM, PARAM_SHAPES)
    assert fragment in str(caught.value)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("source", "fragment"), HOSTILE, ids=lambda v: repr(v)[:40] if isinstance(v, str) else v
)
def test_hostile_source_is_a_target_invalid_through_validate_job_spec(source: str, fragment: str) -> None:
    spec = {
        "method": "svgd",
        "target": {"kind": "expression", "dim": DIM, "log_prob": source, "params": PARAMS},
    }
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec(spec)
    assert caught.value.code == "target_invalid"
    assert caught.value.loc == ("target", "log_prob")
    if 1 <= len(source) <= MAX_SOURCE_LENGTH:  # others are stopped by the field's length limits first
        assert fragment in caught.value.detail
    assert "Traceback" not in caught.value.detail


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "params",
    [
        {"x": 1.0},
        {"exp": 1.0},
        {"pi": 1.0},
        {"__class__": 1.0},
        {"_private": 1.0},
        {"lambda": 1.0},
        {"a-b": 1.0},
        {"\u00e9": 1.0},
        {"m": [[1.0, 2.0], [3.0]]},
        {"m": [[[1.0]]]},
        {"m": []},
        {"m": "1"},
        {"m": True},
        {"m": [1.0, None]},
        {"m": 10**400},
        {"m": [0.0] * 300_000},
        {f"p{i}": 1.0 for i in range(65)},
    ],
)
def test_bad_params_are_rejected(params: dict) -> None:
    spec = {
        "method": "svgd",
        "target": {"kind": "expression", "dim": DIM, "log_prob": "sum(x)", "params": params},
    }
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec(spec)
    assert caught.value.loc == ("target", "params")


def _exercise(payloads: list[str]) -> int:
    """Validate, build, evaluate and differentiate every payload the way the service would; count rejections."""
    rejected = 0
    for source in payloads:
        target = {"kind": "expression", "dim": DIM, "log_prob": source, "params": PARAMS}
        try:
            spec = validate_job_spec({"method": "svgd", "target": target})
        except errors.TargetInvalid:
            rejected += 1
            continue
        built = build_target(spec.target)
        x = torch.linspace(-1, 1, 6, dtype=torch.float32).reshape(3, DIM)
        built.log_prob(x)
        built.score(x)
        parsed = parse_expression(source, DIM, PARAM_SHAPES)
        compiled = compile_expression(parsed)
        compiled.evaluate(
            x.double(),
            {name: torch.tensor(value, dtype=torch.float64) for name, value in PARAMS.items()},
            compiled.make_constants(torch.float64, "cpu"),
        )
    return rejected


class _AuditRecorder:
    """An audit hook (sys.addaudithook; hooks cannot be removed) that records only while `active`."""

    WATCHED_PREFIXES = (
        "open", "os.", "subprocess.", "exec", "compile", "import", "socket.", "ctypes.", "pickle.",
        "marshal.", "shutil.", "urllib.", "http.", "builtins.input", "code.", "cpython.run_", "sys.",
        "webbrowser.", "glob.", "tempfile.", "fcntl.", "resource.", "signal.",
    )  # fmt: skip

    def __init__(self) -> None:
        self.active = False
        self.thread: int | None = None
        self.events: list[tuple[str, tuple]] = []

    def __call__(self, event: str, args: tuple) -> None:
        if self.active and threading.get_ident() == self.thread and event.startswith(self.WATCHED_PREFIXES):
            self.events.append((event, args))


_RECORDER = _AuditRecorder()
sys.addaudithook(_RECORDER)


@pytest.mark.timeout(60)
def test_hostile_payloads_cannot_touch_files_processes_or_the_interpreter() -> None:
    payloads = [source for source, _ in HOSTILE] + VALID
    _RECORDER.thread = threading.get_ident()

    # First pass: lazily imported library modules may be opened here, but nothing outside Python's own
    # installation and this repository, and no code object is executed.
    _RECORDER.events.clear()
    _RECORDER.active = True
    try:
        _exercise(payloads)
    finally:
        _RECORDER.active = False
    allowed_roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.getcwd(), *sys.path) if p}
    for event, args in _RECORDER.events:
        if event in ("open", "exec"):  # a file opened, or a module's code run, by an import
            where = args[0] if event == "open" else getattr(args[0], "co_filename", "")
            path = os.path.realpath(os.fsdecode(where)) if isinstance(where, str | bytes) else ""
            assert any(path.startswith(root + os.sep) for root in allowed_roots), (event, args)
        else:
            assert event in ("compile", "import", "os.listdir", "os.scandir", "sys._getframe"), (event, args)

    # Second pass, everything warm: the only watched event allowed is the "compile" audit event that
    # ast.parse itself raises, for our fixed filename (ast-only parsing; no code object is ever made or run).
    _RECORDER.events.clear()
    _RECORDER.active = True
    try:
        rejected = _exercise(payloads)
    finally:
        _RECORDER.active = False
    assert rejected == len(HOSTILE)
    unexpected = [(event, args) for event, args in _RECORDER.events if event != "compile"]
    assert unexpected == []
    compiles = [args for event, args in _RECORDER.events if event == "compile"]
    assert compiles, "the hook must see ast.parse's compile events (otherwise it is not recording)"
    assert all(args[1] == PARSE_FILENAME for args in compiles)
    assert not any(event == "exec" for event, _ in _RECORDER.events)


def test_the_audit_recorder_does_record_file_access(tmp_path) -> None:
    """The recorder is not vacuous: a real open() inside the window is seen."""
    _RECORDER.thread = threading.get_ident()
    _RECORDER.events.clear()
    _RECORDER.active = True
    try:
        (tmp_path / "probe.txt").write_text("probe")
    finally:
        _RECORDER.active = False
    assert any(event == "open" for event, _ in _RECORDER.events)
