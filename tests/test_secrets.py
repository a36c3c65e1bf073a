"""Secrets stay out of everything (docs/faults.md): HF_TOKEN never reaches a run-log line, the doctor's
output, an image layer, the image's config or `docker inspect`; the running lab gets it as a file. Real
processes and a real Docker engine, as in tests/test_faults.py, whose helpers these tests share."""

import json
import os
import subprocess
import sys

import pytest

from test_faults import PYTHON_ENV, build_copy, build_in_a_process, whole_lines

CANARY = "hf_CanaryTokenNeverPrinted0123456789"


def test_hf_token_never_reaches_a_run_log_line(tmp_path, monkeypatch):
    from grpolab.common.errors import LayerFailure
    from grpolab.run.record import recorded_run
    from grpolab.settings.lab_settings import LabSettings

    monkeypatch.setenv("HF_TOKEN", CANARY)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", CANARY)
    log = tmp_path / "runlog.jsonl"
    with recorded_run("smoke", LabSettings(), log_path=log, say=lambda *_: None):
        pass
    with pytest.raises(LayerFailure):
        with recorded_run("lab", LabSettings(), log_path=log, say=lambda *_: None):
            raise LayerFailure("rewards", "a reward failed", "fix it")
    assert len(whole_lines(log)) == 4 and CANARY not in log.read_text()


def test_hf_token_never_reaches_the_doctors_output(tmp_path):
    env = {**PYTHON_ENV, "HF_TOKEN": CANARY, "GRPOLAB_RUNS_DIR": str(tmp_path), "GRPOLAB_TRACK": "c"}
    for flags in ([], ["--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "grpolab", "doctor", *flags], env=env, capture_output=True, text=True, timeout=600
        )
        assert "HF_TOKEN" in proc.stdout and CANARY not in proc.stdout + proc.stderr


@pytest.mark.docker
def test_hf_token_never_reaches_an_image_layer_its_config_or_docker_inspect(tmp_path):
    repo = build_copy(tmp_path)
    (repo / ".env").write_text((repo / ".env").read_text() + f"HF_TOKEN={CANARY}\n")
    (repo / "entrypoint" / "grpolab" / "changed.py").write_text("# a code change: the build has layers to make\n")
    build = build_in_a_process(repo, "grpolab-test:secrets", {"HF_TOKEN": CANARY})
    output = build.communicate(timeout=900)[0]
    assert build.returncode == 0, output
    try:
        seen = {
            "docker inspect": subprocess.run(
                ["docker", "inspect", "grpolab-test:secrets"], capture_output=True, text=True, timeout=600
            ).stdout,
            "docker history": subprocess.run(
                ["docker", "history", "--no-trunc", "grpolab-test:secrets"], capture_output=True, text=True, timeout=600
            ).stdout,
            # the files of every layer the build made or could have touched (the base's and the venv's are the lock's)
            "image files": subprocess.run(
                [
                    "docker",
                    "run",
                    "--rm",
                    "--entrypoint",
                    "sh",
                    "grpolab-test:secrets",
                    "-c",
                    "grep -rl hf_Canary /opt/grpolab /home/lab /work /etc /root 2>/dev/null; env",
                ],
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout,
        }
        assert "grpolab-test:secrets" in seen["docker inspect"] and "GRPOLAB_TRACK=c" in seen["image files"]
        for where, text in seen.items():
            assert CANARY not in text, where
    finally:
        subprocess.run(["docker", "rmi", "-f", "grpolab-test:secrets"], capture_output=True, timeout=600)


@pytest.mark.docker
def test_hf_token_reaches_the_running_lab_as_a_file_never_in_docker_inspect(tmp_path):
    repo = build_copy(tmp_path)  # its .env ends with a user's HF_TOKEN line, after the lines `invoke build` owns
    read_token = "import huggingface_hub; print(repr(huggingface_hub.get_token()))"
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    cases = (("shell", CANARY, ""), (".env", None, CANARY), ("none", None, None))
    names = {case: f"grpolab-test-token-{case.strip('.')}" for case, _, _ in cases}
    seen, env_text = {}, (repo / ".env").read_text()
    try:
        for case, shell, env_line in cases:
            (repo / ".env").write_text(
                env_text.replace("HF_TOKEN=hf_user_line_kept\n", f"HF_TOKEN={env_line}\n" if env_line else "")
            )
            name = names[case]
            run = subprocess.run(
                ["docker", "compose", "run", "-T", "--name", name, "--entrypoint", "python", "lab", "-c", read_token],
                cwd=repo,
                capture_output=True,
                text=True,
                timeout=300,
                env={**clean, **({"HF_TOKEN": shell} if shell else {})},
            )
            inspect = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=600).stdout
            seen[case] = (
                run.returncode,
                run.stdout.strip().splitlines()[-1:],
                CANARY in inspect,
                '"HF_TOKEN_PATH=/run/secrets/hf_token"' in inspect,
            )
    finally:
        for name in names.values():
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=600)
        subprocess.run(["docker", "compose", "down", "--volumes"], cwd=repo, capture_output=True, timeout=300)
    # huggingface_hub (so transformers, TRL and vLLM) gets the token, from the shell or .env; inspect never shows it
    assert seen == {
        "shell": (0, [repr(CANARY)], False, True),
        ".env": (0, [repr(CANARY)], False, True),
        "none": (0, ["None"], False, True),
    }


def test_the_doctor_reports_a_token_file_without_its_value(tmp_path):
    token_file = tmp_path / "hf_token"
    token_file.write_text(CANARY + "\n")
    base = {k: v for k, v in PYTHON_ENV.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env = {**base, "HF_TOKEN_PATH": str(token_file), "GRPOLAB_RUNS_DIR": str(tmp_path), "GRPOLAB_TRACK": "c"}
    summaries = {}
    for case, content in (("token", CANARY + "\n"), ("blank", "\n")):
        token_file.write_text(content)
        proc = subprocess.run(
            [sys.executable, "-m", "grpolab", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=600
        )
        assert CANARY not in proc.stdout + proc.stderr
        items = {i["name"]: i for i in json.loads(proc.stdout)["items"]}
        summaries[case] = items["huggingface token"]["summary"]
    assert summaries["token"] == f"from token file {token_file} (value not shown)"
    assert summaries["blank"].startswith("no HF_TOKEN")


