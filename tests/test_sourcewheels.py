"""`invoke source-wheels` (hostlab/images/sourcewheels.py): the compile of the lock's source-only packages, copied out
of
buildah's image of it. The compile itself runs in .ci/run before every test run (the test venv installs its wheel), and
tests/test_images.py checks that venv's libraries against the image's; here, the copying out, on a real buildah image
(the stand-in base with two folders more), and the refusal for a lock with nothing to compile."""

import shutil

import pytest

from hostlab import HostError

from hostlab.host import engine
from hostlab.images.standin import host_arch, standin_name
from hostlab.images.builders.buildah_store import base_into_buildah, run_buildah
from hostlab.images.sourcewheels import copy_out, source_wheels

STANDIN = standin_name(host_arch())


def test_a_lock_without_source_only_packages_is_told_there_is_nothing_to_compile(tmp_path):
    with pytest.raises(HostError, match="track cv's lock has no package that PyPI ships only as source"):
        source_wheels("cv", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.docker
@pytest.mark.skipif(
    not (shutil.which("buildah") and engine.running() and engine.image_or_none(STANDIN) is not None),
    reason="needs buildah, a Docker engine and the stand-in base (CI has all three: setup-host.sh, invoke base)",
)
def test_the_images_folders_are_copied_out_whole_and_replace_what_was_there(tmp_path):
    made = tmp_path / "made"
    (made / "wheels").mkdir(parents=True)
    (made / "sdist" / "pkg").mkdir(parents=True)
    (made / "wheels" / "pkg-1.0-py3-none-any.whl").write_bytes(b"wheel bytes\n")
    (made / "sdist" / "pkg" / "pkg-1.0.tar.gz").write_bytes(bytes(range(256)) * 64)
    container = (
        run_buildah("from", "--pull-never", base_into_buildah(engine.image_or_none(STANDIN).id))
        .stdout.strip()
        .splitlines()[-1]
    )
    try:
        for folder in ("wheels", "sdist"):
            run_buildah("copy", container, str(made / folder), f"/{folder}")
        run_buildah("commit", "--quiet", "--iidfile", str(tmp_path / "iid"), container)
    finally:
        run_buildah("rm", container, check=False)
    image = (tmp_path / "iid").read_text().strip().removeprefix("sha256:")
    into = tmp_path / "into"
    (into / "wheels").mkdir(parents=True)
    (into / "wheels" / "pkg-0.9-py3-none-any.whl").write_bytes(b"an older lock's wheel\n")
    (into / "kept").write_text("not one of the folders\n")
    try:
        written = copy_out(image, ("wheels", "sdist"), into)
    finally:
        run_buildah("rmi", image, check=False)
    assert written == [into / "sdist" / "pkg" / "pkg-1.0.tar.gz", into / "wheels" / "pkg-1.0-py3-none-any.whl"]
    for path in written:
        assert path.read_bytes() == (made / path.relative_to(into)).read_bytes()
    assert sorted(p.name for p in (into / "wheels").iterdir()) == ["pkg-1.0-py3-none-any.whl"]  # the older one gone
    assert (into / "kept").read_text() == "not one of the folders\n"
