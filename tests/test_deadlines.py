"""Every wait in the tests has a deadline: a child that hangs fails its test, it never hangs the suite.

Two checks: the tests' own source, read as code (every subprocess.run/check_output/call/check_call and every
Popen.wait()/communicate() passes a timeout; no test reads a child's pipe with a bare readline()), and the one helper
that waits for a line (conftest.read_until) shown to give up on a child that prints nothing."""

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import read_until

TESTS = Path(__file__).resolve().parent
RUNS_A_CHILD = {"run", "check_output", "call", "check_call"}


def waits_without_deadline(source: str) -> list[str]:
    """`line: call` for each wait in `source` that could wait for ever."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        keywords = {keyword.arg for keyword in node.keywords}
        if None in keywords:  # **options: the timeout may be among them, and the reader cannot tell
            continue
        name, owner = node.func.attr, node.func.value
        if (
            isinstance(owner, ast.Name)
            and owner.id == "subprocess"
            and name in RUNS_A_CHILD
            and "timeout" not in keywords
        ):
            found.append(f"{node.lineno}: subprocess.{name} without timeout=")
        elif (
            name in {"wait", "communicate"}
            and not node.args
            and "timeout" not in keywords
            and not (isinstance(owner, ast.Name) and owner.id in {"event", "threading"})
        ):
            found.append(f"{node.lineno}: .{name}() without timeout=")
        elif name == "readline" and isinstance(owner, ast.Attribute) and owner.attr == "stdout":
            found.append(f"{node.lineno}: .stdout.readline() (conftest.read_until has a deadline)")
    return found


def test_every_wait_in_the_tests_has_a_deadline():
    found = {path.name: waits_without_deadline(path.read_text()) for path in sorted(TESTS.glob("*.py"))}
    assert {name: waits for name, waits in found.items() if waits} == {}


def test_the_reader_finds_each_kind_of_wait_without_a_deadline():
    source = (
        "import subprocess\n"
        "subprocess.run(['true'])\n"
        "subprocess.run(['true'], timeout=5)\n"
        "process = subprocess.Popen(['true'], stdout=subprocess.PIPE)\n"
        "process.stdout.readline()\n"
        "process.communicate()\n"
        "process.wait(timeout=5)\n"
    )
    assert waits_without_deadline(source) == [
        "2: subprocess.run without timeout=",
        "5: .stdout.readline() (conftest.read_until has a deadline)",
        "6: .communicate() without timeout=",
    ]


def test_read_until_gives_up_on_a_child_that_prints_nothing_and_kills_it():
    child = subprocess.Popen([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"],
                             stdout=subprocess.PIPE, text=True)
    assert read_until(child, lambda line: line == "started\n", timeout_s=60) == "started\n"
    started = time.monotonic()
    with pytest.raises(AssertionError, match="waited 1 s for a line that never came"):
        read_until(child, lambda line: line == "never\n", timeout_s=1)
    assert child.poll() is not None and time.monotonic() - started < 60  # killed, not left behind
