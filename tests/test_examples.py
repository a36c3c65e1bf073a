"""The lesson's examples (examples/) run in every image CI builds as a learner types them, `python examples/NAME.py` in
the image's working directory: each one that its image has the engine for trains (or scores) and says what moved;
each one that it lacks stops in one line naming what is missing and which image has it, with no traceback."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import get_track  # noqa: E402

from hostlab.ci.testcommand import LLAMACPP_IMAGE, REPRODUCIBLE_TRACKS  # noqa: E402  (the images CI builds)
from hostlab.host import engine  # noqa: E402
from hostlab.images.build import image_name  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
C_IMAGE, CV_IMAGE = (image_name(get_track(name)) for name in ("c", "cv"))
CI_IMAGES = [*(image_name(get_track(name)) for name in REPRODUCIBLE_TRACKS), LLAMACPP_IMAGE]
STEPS = 24  # tiny_task.SHORT_RUN's max_steps
REWARDS = re.compile(r"^mean reward per step: (?P<steps>[0-9. ]+) \(", re.MULTILINE)


def run_example(image: str, name: str) -> subprocess.CompletedProcess:
    """`python examples/NAME` in the image, as `docker compose run lab shell -c ...` runs it (the image's entrypoint,
    user and working directory)."""
    if not engine.running() or engine.image_or_none(image) is None:
        pytest.skip(f"image {image} not built here (`invoke build`; CI builds it)")
    return subprocess.run(
        ["docker", "run", "--rm", image, "shell", "-c", f"python examples/{name}"],
        capture_output=True,
        text=True,
        timeout=600,
    )


def trained(proc: subprocess.CompletedProcess) -> list[float]:
    """The mean reward of each of the run's steps, after checking it trained all of them and the rewards moved: not
    zero from the first step (the tiny model answers its own prompts) and not one value throughout."""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    found = REWARDS.search(proc.stdout)
    assert found, proc.stdout[-2000:]
    rewards = [float(value) for value in found["steps"].split()]
    assert len(rewards) == STEPS and rewards[0] > 0 and len(set(rewards)) > 1, rewards
    return rewards


def learned(proc: subprocess.CompletedProcess) -> None:
    """Trained, and the last quarter of the steps earned more reward on average than the first: learning, not only
    noise (at learning rate 0 the same check fell on this machine, three seeds of three)."""
    rewards = trained(proc)
    quarter = STEPS // 4
    assert sum(rewards[-quarter:]) > sum(rewards[:quarter]), rewards


def refused(proc: subprocess.CompletedProcess, name: str, words: str) -> None:
    """Stopped in one line: non-zero, the example's name and `words` on stderr's only line, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"{name}: ") and words in lines[0], lines[0]


def scores(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.rsplit(None, 2)[0]: line.split()[-2:] for line in proc.stdout.splitlines()[1:]}
    assert rows == {
        "'<answer>42</answer>'": ["1.0", "1.0"],
        "'<answer>41</answer>'": ["0.0", "1.0"],
        "'The sum is 42.'": ["1.0", "0.0"],
        "'<answer>forty-two</answer>'": ["0.0", "0.0"],
    }, proc.stdout


def beta_zero(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("beta ")]
    assert lines[0] == "beta 0.0: no reference model; kl logged: no", lines
    assert re.fullmatch(r"beta 0\.04: a reference model of [1-9][0-9]* bytes; kl logged: yes", lines[1]), lines


def colocate(proc: subprocess.CompletedProcess) -> None:
    trained(proc)
    assert "rollouts: vLLM colocate, vLLM's cpu build in this process" in proc.stdout, proc.stdout[-2000:]


def llamacpp(proc: subprocess.CompletedProcess) -> None:
    trained(proc)
    # never refreshed: every batch after the first sampled from the starting policy, one step staler each step
    assert f"rollouts: STALE: {STEPS} batches sampled up to {STEPS - 1} optimiser steps behind" in proc.stdout


NO_LLAMA = "has no llama.cpp"
NO_VLLM = "has no vLLM"
NO_CUDA = "needs CUDA GPUs, and this machine has none"
# What each example does in each image CI builds: a check of its output, or the words of its one-line refusal.
EXPECTED = {
    C_IMAGE: {"rewards.py": scores, "quickstart.py": learned, "beta_zero.py": beta_zero,
              "llamacpp_rollout.py": NO_LLAMA, "vllm_colocate.py": NO_VLLM, "vllm_server.py": NO_VLLM},
    CV_IMAGE: {"rewards.py": scores, "quickstart.py": learned, "beta_zero.py": beta_zero,
               "llamacpp_rollout.py": NO_LLAMA, "vllm_colocate.py": colocate, "vllm_server.py": NO_CUDA},
    # track c's image with llama.cpp compiled in: the same lab stage as c's, so only what llama.cpp changes
    LLAMACPP_IMAGE: {"llamacpp_rollout.py": llamacpp, "vllm_colocate.py": NO_VLLM},
}
CASES = [(image, name) for image in CI_IMAGES for name in EXPECTED[image]]


def test_every_example_is_expected_in_the_images_ci_builds():
    examples = {p.name for p in (REPO / "examples").glob("*.py")} - {"tiny_task.py"}  # tiny_task: their shared part
    for image in (C_IMAGE, CV_IMAGE):
        assert set(EXPECTED[image]) == examples, image


@pytest.mark.docker
@pytest.mark.parametrize(("image", "name"), CASES)
def test_the_example_runs_or_says_in_one_line_what_the_image_lacks(image, name):
    expected = EXPECTED[image][name]
    proc = run_example(image, name)
    if callable(expected):
        expected(proc)
    else:
        refused(proc, name, expected)
