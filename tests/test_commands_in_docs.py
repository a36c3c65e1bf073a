"""Every command the README, docs/*.md, images/Dockerfile, images/tracks.toml and images/**/*.sh name exists as written.

An `invoke ...` is parsed by invoke's own parser over tasks.py's namespace (the task exists, every flag is one of its
flags); a `grpolab ...`, `python -m grpolab ...` or `docker compose run SERVICE ...` is checked against the lab's
argparse parser (the subcommand exists, every flag is one of its flags; `python -m grpolab.bench` against its own).
Placeholders pass: `--track T`, `<track>`, `$VAR`, `[--cold]`, `...`. A renamed task or a dropped flag fails here,
with the file and line, before a learner types it."""

import re
import shlex
import sys
from pathlib import Path

import pytest
from invoke import Collection, Program
from invoke.exceptions import ParseError
from invoke.loader import FilesystemLoader
from invoke.parser import Parser, ParserContext

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # hostlab/ and tasks.py at the repo root
sys.path.insert(0, str(REPO / "entrypoint"))

IMAGE_COMMENTS = [REPO / "images" / "Dockerfile", REPO / "images" / "tracks.toml",
                  *sorted((REPO / "images").rglob("*.sh"))]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `docker compose run`'s own options that take a value: the service is the first word after them.
COMPOSE_RUN_VALUES = {"-e", "--env", "--entrypoint", "--name", "-v", "--volume", "-p", "--publish", "-u", "--user",
                      "-w", "--workdir", "-l", "--label", "--env-from-file", "--pull", "--cap-add", "--cap-drop"}
# invoke tasks whose --args goes to `python -m grpolab <command>` as it is.
PASSES_ARGS = {"smoke": "smoke", "lab": "lab", "estimate": "estimate", "doctor": "doctor",
               "tiny-model": "tiny-model", "export": "export"}
SEPARATORS = re.compile(r"\s(?:&&|\|\||;|\|)\s|\s#\s|\s#$|^#\s")  # shell operators, and a comment after a command


# ------------------------------------------------------------------------------------------ the parsers
def invoke_parser() -> Parser:
    """invoke's parser as `invoke` builds it: the core flags, then tasks.py's namespace."""
    module, _ = FilesystemLoader(start=str(REPO)).load("tasks")
    contexts = Collection.from_module(module).to_contexts()
    program = Program()
    return Parser(initial=ParserContext(args=program.core_args() + program.task_args()), contexts=contexts)


def grpolab_parsers() -> dict:
    """{"grpolab": its argparse parser, "grpolab.bench": the measurement commands' parser}."""
    from grpolab import cli
    from grpolab.bench import commands

    return {"grpolab": cli.build_parser(), "grpolab.bench": commands.build_parser()}


def compose_services() -> set[str]:
    """Every service the Compose files under compose/ declare (two spaces in, under `services:`)."""
    services = set()
    for path in (REPO / "compose").glob("*.yaml"):
        inside = False
        for line in path.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            if not line.startswith(" "):
                inside = line.startswith("services:")
            elif inside and (match := re.match(r"  ([a-z][\w-]*):", line)):
                services.add(match.group(1))
    return services


# ------------------------------------------------------------------------------- where commands are written
def snippets(path: Path):
    """(line number, text) of each piece of code: fenced blocks' lines and `inline` spans of Markdown; the comments'
    `inline` spans and the shell's own lines of a Dockerfile or script."""
    markdown = path.suffix == ".md"
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if markdown and line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if markdown and fenced:
            yield number, line
            continue
        stripped = line.strip()
        if not markdown and path.suffix == ".sh" and stripped and not stripped.startswith("#"):
            yield number, stripped  # a script's own commands run as written
        for span in re.findall(r"`([^`]+)`", line.replace("\\`", "`")):
            yield number, span


def commands(text: str):
    """(kind, words) for each command in a piece of code: kind invoke, grpolab, grpolab.bench or compose."""
    for segment in SEPARATORS.split(text):
        try:
            words = shlex.split(segment)
        except ValueError:  # an unclosed quote in prose
            words = segment.split()
        for i, word in enumerate(words):
            rest = words[i + 1:]
            if (word in ("invoke", "inv") or word.endswith("/invoke")) and all(map(launcher, words[:i])):
                yield "invoke", rest
            elif word == "-m" and rest and rest[0] in ("grpolab", "grpolab.bench"):
                yield rest[0], rest[1:]
            elif word == "grpolab" and all(map(launcher, words[:i])):
                yield "grpolab", rest
            elif word == "docker" and rest[:1] == ["compose"] and "run" in rest:
                yield "compose", rest[rest.index("run") + 1:]
            else:
                continue
            break


def launcher(word: str) -> bool:
    """A word that may come before a command (`sudo -E env PATH=$PATH invoke ...`); any other makes it prose."""
    return word in ("sudo", "env", "exec", "time") or word.startswith("-") or "=" in word


def placeholder(word: str) -> bool:
    """`T`, `ARCH`, `<track>`, `$VAR`, `{a,b}`, `bench.*`: a word the reader fills in."""
    return bool(re.search(r"[<>${}*…]|\.\.\.", word)) or (word.isupper() and len(word) < 12)


def cleaned(words: list[str]) -> list[str]:
    """The words with optional parts' brackets and `...` taken away."""
    out = []
    for word in words:
        word = word.strip("[]()")
        if word and word not in ("...", "…"):
            out.append(word)
    return out


# --------------------------------------------------------------------------------------------- the checks
def invoke_problems(words: list[str], parser: Parser, lab: dict) -> list[str]:
    words = cleaned(words)
    first = next((w for w in words if not w.startswith("-")), None)
    if first and placeholder(first):
        return []
    if words[:1] in (["--help"], ["-h"]) and len(words) > 1:  # invoke's own reading: help for the task named next
        return [] if words[1] in parser.contexts else [f"--help names no task: {words[1]}"]
    try:
        result = parser.parse_argv(words)
    except ParseError as error:
        if "needed value and was not given one" in str(error) and words[-1].startswith("--"):
            return []  # the prose names a flag, not its value
        if "did not receive required positional arguments" in str(error):
            return []  # the prose names the task, not all it needs
        return [str(error)]
    problems = []
    for context in result[1:]:
        passed = context.args.get("args")
        if context.name in PASSES_ARGS and passed and passed.value:
            problems += grpolab_problems([PASSES_ARGS[context.name], *shlex.split(passed.value)], lab["grpolab"])
    return problems


def grpolab_problems(words: list[str], parser) -> list[str]:
    words = cleaned(words)
    subs = next(a for a in parser._actions if a.choices and hasattr(a, "_name_parser_map")).choices
    command = next((w for w in words if not w.startswith("-")), None)
    if command is None or placeholder(command):
        return []
    if command not in subs:
        return [f"no subcommand {command!r}"]
    known = subs[command]._option_string_actions
    problems = []
    for word in words[words.index(command) + 1:]:
        if word == "--":  # what follows is another program's (serve's vllm arguments)
            break
        if re.match(r"--?[A-Za-z]", word) and word.split("=")[0] not in known:
            problems.append(f"{command} has no {word.split('=')[0]}")
    return problems


def compose_problems(words: list[str], services: set[str], lab: dict) -> list[str]:
    words = cleaned(words)
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in COMPOSE_RUN_VALUES else 1
    if i >= len(words) or placeholder(words[i]):
        return []
    if words[i] not in services:
        return [f"no Compose service {words[i]!r}"]
    argv = words[i + 1:]
    if not argv or argv[0] == "shell":  # the image's entrypoint: `shell` opens bash, anything else is grpolab's
        return []
    return grpolab_problems(argv, lab["grpolab"])


def problems_in(text: str, parser: Parser, lab: dict, services: set[str]) -> list[str]:
    """What is wrong with each command in one piece of code."""
    problems = []
    for kind, words in commands(text):
        if kind == "invoke":
            problems += invoke_problems(words, parser, lab)
        elif kind == "compose":
            problems += compose_problems(words, services, lab)
        else:
            problems += grpolab_problems(words, lab[kind])
    return problems


@pytest.fixture(scope="module")
def checkers():
    return invoke_parser(), grpolab_parsers(), compose_services()


def test_every_command_in_the_docs_exists(checkers):
    found = []
    for path in DOCS + IMAGE_COMMENTS:
        for number, text in snippets(path):
            for problem in problems_in(text, *checkers):
                found.append(f"{path.relative_to(REPO)}:{number}: `{text.strip()}`: {problem}")
    assert not found, "commands that do not exist as written:\n" + "\n".join(found)


@pytest.mark.parametrize("text", [
    "invoke build --with llamacpp",  # the flag that became --rollout
    "invoke frobnicate",
    "invoke lock --check",
    "invoke lock.check --prove",
    "invoke --help lock.nothing",
    'invoke tiny-model --args "--rebuild --outdir DIR"',
    "python -m grpolab smok --track c",
    "grpolab lab --track c --no-such-flag 1",
    "docker compose run --rm nolab",
    "docker compose run lab lab --no-such-flag",
    "bash images/setup-host.sh && . .venvs/host/bin/activate && invoke upp",
    "sudo -E env PATH=$PATH invoke bench.projection --colder",
])
def test_a_command_that_does_not_exist_fails(checkers, text):
    assert problems_in(text, *checkers), text


@pytest.mark.parametrize("text", [
    "invoke lock --track T",
    "invoke lock.base --arch ARCH",
    "invoke build.reproducible --track <track> --record",
    "invoke bench.projection [--cold] [--rounds N] ...",
    "invoke bench.*",
    "invoke --help lock.check",
    "invoke build --builder",  # prose naming a flag
    "sudo -E env PATH=$PATH invoke bench.projection --cold",
    'invoke tiny-model --args "--rebuild --out DIR"',
    "python -m grpolab <command>",
    "python -m grpolab serve --check URL -- --enforce-eager",
    "docker compose run --rm lab serve --dry-run   # the server's command",
    "docker compose run lab shell",
    "docker compose version",
    "lockfiles/c.txt was changed after invoke lock wrote it",  # an error message quoted: prose, not a command
    "docker compose run lab-server",
])
def test_placeholders_and_prose_pass(checkers, text):
    assert problems_in(text, *checkers) == []
