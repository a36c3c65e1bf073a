"""An image buildah built, handed to the Docker engine (hostlab/images/builders/handover.py): only the layers the engine
lacks at the
bottom of its images, with buildah's id kept; the whole image where the engine holds too little of it. The images
here are buildah's and the engine's for real: the stand-in base with a file or two more."""

import os
import shutil
import subprocess

import pytest

from hostlab.host import engine
from hostlab.images.standin import host_arch, standin_name
from hostlab.images.builders.buildah_store import base_into_buildah, buildah_layers, run_buildah
from hostlab.images.builders.handover import buildah_to_engine, held_bottom

STANDIN = standin_name(host_arch())
needs_buildah_and_base = pytest.mark.skipif(
    not (shutil.which("buildah") and engine.running() and engine.image_or_none(STANDIN) is not None),
    reason="needs buildah, a Docker engine and the stand-in base (CI has all three: setup-host.sh, invoke base)",
)


def test_only_a_bottom_the_engine_shares_counts_as_held():
    assert held_bottom(["a", "b", "c"], [["a", "b", "x"], ["b", "c"]]) == 2
    assert held_bottom(["a", "b"], [["b", "a"]]) == 0  # the same layers over others are other layers to the engine
    assert held_bottom(["a"], [["a", "b", "c"]]) == 1
    assert held_bottom(["a", "b"], []) == 0


def buildah_image_with(parent: str, name: str, content: bytes, folder) -> str:
    """`parent` (an image in buildah's store, or scratch) with one layer more, the file /`name`: its id."""
    container = run_buildah("from", "--pull-never", parent).stdout.strip().splitlines()[-1]
    try:
        (folder / name).write_bytes(content)
        run_buildah("copy", container, str(folder / name), f"/{name}")
        run_buildah("commit", "--quiet", "--iidfile", str(folder / "iid"), container)
        return (folder / "iid").read_text().strip().removeprefix("sha256:")
    finally:
        run_buildah("rm", container, check=False)


def in_engine(name: str, *command: str) -> str:
    return subprocess.run(["docker", "run", "--rm", "--entrypoint", command[0], name, *command[1:]],
                          capture_output=True, text=True, check=True, timeout=300).stdout


@pytest.mark.docker
@needs_buildah_and_base
def test_the_engine_is_sent_only_the_layers_it_lacks_and_keeps_buildahs_id(tmp_path, capsys):
    base = base_into_buildah(engine.image_or_none(STANDIN).id)
    first = buildah_image_with(base, "first", f"first {os.getpid()}\n".encode(), tmp_path)
    second = buildah_image_with(first, "second", os.urandom(1 << 20), tmp_path)
    names = ["grpolab-test-handover:first", "grpolab-test-handover:second"]
    try:
        assert buildah_to_engine(first, names[0]).removeprefix("sha256:") == first
        assert buildah_to_engine(second, names[1]).removeprefix("sha256:") == second
        said = capsys.readouterr().out
        layers = len(buildah_layers(second))
        assert f"handing {second[:12]} to the Docker engine as {names[1]}: 1 of its {layers} layers" in said, said
        assert f"the engine holds the {layers - 1} under them" in said and "every layer" not in said
        assert in_engine(names[1], "sh", "-c", "cat /first; wc -c < /second") == f"first {os.getpid()}\n1048576\n"
    finally:
        subprocess.run(["docker", "image", "rm", "--force", *names], capture_output=True, timeout=300)
        run_buildah("rmi", second, first, check=False)


@pytest.mark.docker
@needs_buildah_and_base
def test_an_image_the_engine_holds_too_little_of_goes_whole(tmp_path, capsys):
    alone = buildah_image_with("scratch", "alone", f"alone {os.getpid()}\n".encode(), tmp_path)
    name = "grpolab-test-handover:alone"
    try:
        assert buildah_to_engine(alone, name).removeprefix("sha256:") == alone
        assert f"handing {alone[:12]} to the Docker engine as {name}, every layer" in capsys.readouterr().out
        saved = subprocess.run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", name],
                               capture_output=True, text=True, check=True, timeout=300).stdout
        assert saved.count("sha256:") == 1
    finally:
        subprocess.run(["docker", "image", "rm", "--force", name], capture_output=True, timeout=300)
        run_buildah("rmi", alone, check=False)
