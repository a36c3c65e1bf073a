"""Run inside the image after the install: every locked package must be installed at exactly its locked
version, and the ones named on the command line (torch, vllm, triton) must be present when locked.
Modules after --import must import: a package compiled at install time (llama_cpp) that can't load its
library fails the build here rather than the first run.

Users of similar images keep hitting a later `pip install` that silently swaps torch; this makes a build
that ends up with anything but the lock fail, naming the package.

usage: python verify-locked.py LOCK [NAME ...] [--import MODULE ...]
"""

import importlib
import re
import sys
from importlib import metadata

REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(lock_file: str, *args: str) -> int:
    watched, _, modules = " ".join(args).partition("--import")
    watched, modules = watched.split(), modules.split()
    locked = {}
    with open(lock_file) as f:
        for line in f:
            m = REQ.match(line)
            if m:
                locked[canonical(m.group(1))] = m.group(2)
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = [
        f"{name} {installed.get(name, 'missing')} (lock: {version})"
        for name, version in sorted(locked.items())
        if installed.get(name) != version
    ]
    for name in watched:
        name = canonical(name)
        if name in locked:
            print(f"verified: {name} {installed.get(name)} == lock {locked[name]}")
    if wrong:
        print("ERROR: installed packages differ from the lock: " + "; ".join(wrong), file=sys.stderr)
        return 1
    print(f"verified: all {len(locked)} locked packages installed at their locked versions")
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # an ImportError, or an OSError from a shared library that won't load
            print(f"ERROR: {module} was installed but does not import: {error}", file=sys.stderr)
            return 1
        print(f"verified: {module} imports")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
