"""vLLM server mode's server: `grpolab serve` builds TRL's command for the lab's model and refuses where it can't
run; `invoke serve` starts the Compose service only for an image that can serve, on a host that can run it.
The server itself needs a GPU: images/gpu/check_vllm.sh starts it for real."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.errors import LayerFailure  # noqa: E402
from grpolab.rollouts import installed_vllm_version  # noqa: E402
from grpolab.rollouts.serve import refuse_unless_servable  # noqa: E402

from hostlab import REPO, HostError

from hostlab.host import engine  # noqa: E402
from hostlab.host.detect import HostFacts  # noqa: E402
from hostlab.run.serve import serve, server_tracks, wait_until_healthy  # noqa: E402


def python(*args):
    """This interpreter with the lab's code on its path and a bare PATH (no `vllm` command)."""
    env = {"PYTHONPATH": str(REPO / "entrypoint"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)


def grpolab(*args):
    return python("-m", "grpolab", *args)


def dry_run(*args) -> list[str]:
    proc = grpolab("serve", "--dry-run", *args)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout.strip().splitlines()[-1])


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_command_has_trls_server_mode_flags_and_the_labs_model():
    argv = dry_run("--track", "n")
    assert argv[:4] == ["VLLM_SERVER_DEV_MODE=1", "vllm", "serve", "Qwen/Qwen3-1.7B"]  # track n's row
    assert value(argv, "--weight-transfer-config").replace(" ", "") == '{"backend":"nccl"}'
    assert value(argv, "--logprobs-mode") == "processed_logprobs" and value(argv, "--max-logprobs") == "-1"
    assert value(argv, "--dtype") == "bfloat16"
    assert value(argv, "--max-model-len") == str(256 + 512)  # prompt + completion, the lab's lengths
    assert value(argv, "--port") == "8000" and value(argv, "--gpu-memory-utilization") == "0.9"


def test_settings_flags_and_extra_vllm_arguments_reach_the_command():
    argv = dry_run("--track", "n", "--model", "Qwen/Qwen3-0.6B", "--max-completion-length", "64", "--port", "8011",
                   "--gpu-memory-utilization", "0.5", "--", "--enforce-eager")
    assert argv[3] == "Qwen/Qwen3-0.6B" and value(argv, "--max-model-len") == str(256 + 64)
    assert value(argv, "--port") == "8011" and value(argv, "--gpu-memory-utilization") == "0.5"
    assert argv[-1] == "--enforce-eager"


def test_the_tiny_model_is_served_from_its_folder():
    argv = dry_run("--track", "c")
    assert argv[3].endswith("entrypoint/tiny-model") and value(argv, "--dtype") == "float32"  # the committed model


def test_bad_memory_fraction_is_an_input_error():
    proc = grpolab("serve", "--dry-run", "--track", "n", "--gpu-memory-utilization", "1.5")
    assert proc.returncode == 2 and "must be in (0, 1]" in proc.stderr


@pytest.mark.skipif(installed_vllm_version() is not None, reason="vLLM is installed here")
def test_without_vllm_serve_is_refused_in_the_rollout_layer():
    proc = grpolab("serve", "--track", "n")
    assert proc.returncode == 14, proc.stdout + proc.stderr
    assert "[rollout] vllm is not installed" in proc.stderr


def test_macos_is_refused():
    with pytest.raises(LayerFailure, match="macOS"):
        refuse_unless_servable(platform="darwin")


# --- invoke serve ---------------------------------------------------------------------------------------


def env_file(tmp_path, track):
    path = tmp_path / ".env"
    path.write_text(f"# written by a test\nCOMPOSE_FILE=compose/base.yaml\nLAB_TRACK={track}\n")
    return path


def test_server_tracks_are_the_tracks_with_vllm():
    assert set(server_tracks()) == {"s", "n", "cv"}  # cv: vLLM's CPU build (serves, can't take TRL's NCCL weights)


def test_invoke_serve_without_a_build_says_what_to_do(tmp_path):
    with pytest.raises(HostError, match="no image is recorded.*invoke build --track"):
        serve(env_file=tmp_path / ".env")


def test_invoke_serve_refuses_an_image_without_server_mode(tmp_path):
    with pytest.raises(HostError, match="track c's, which has no vLLM.*Tracks whose image can: s, n, cv"):
        serve(env_file=env_file(tmp_path, "c"))


def test_invoke_serve_waits_a_bounded_time_with_progress(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(HostError, match=r"did not answer /health within 1 s(.|\n)*docker compose logs vllm"):
        wait_until_healthy(port, timeout_s=1.0, interval_s=0.2)
    assert "waiting for the vLLM server to load the model" in capsys.readouterr().out


@pytest.mark.docker
@pytest.mark.skipif(not engine.running(), reason="no Docker engine reachable (CI starts one)")
def test_invoke_serve_names_the_missing_gpu(tmp_path):
    no_gpu = HostFacts(system="linux", arch="amd64")
    with pytest.raises(HostError, match="needs an NVIDIA GPU"):
        serve(env_file=env_file(tmp_path, "n"), facts=no_gpu)


def test_without_trl_the_dry_run_says_where_to_run_it():
    # A host with only the `host` extra has no TRL: a sentence, not a traceback.
    code = ("import sys; sys.modules['trl'] = None; from grpolab.cli import main; sys.exit(main(['serve', '--dry-run', "
            "'--track', 'n']))")
    proc = python("-c", code)
    assert proc.returncode == 14 and "Traceback" not in proc.stderr
    assert "docker compose run --rm lab serve --dry-run" in proc.stderr


# --- safe by default: loopback unless asked, and then it says what it exposes ---------------------------


def test_the_server_listens_on_loopback_by_default():
    argv = dry_run("--track", "n")
    assert value(argv, "--host") == "127.0.0.1"


def test_another_address_prints_what_it_exposes():
    quiet = grpolab("serve", "--dry-run", "--track", "n")
    assert quiet.returncode == 0 and "WARNING" not in quiet.stderr
    loud = grpolab("serve", "--dry-run", "--track", "n", "--host", "0.0.0.0")
    assert loud.returncode == 0
    assert "listens on 0.0.0.0" in loud.stderr and "no authentication" in loud.stderr
    assert "replace the model's weights" in loud.stderr and "development endpoints" in loud.stderr


def test_trls_client_has_no_api_key_to_send():
    # Why the server runs without vLLM's --api-key: TRL's client could not talk to it. When a TRL release adds
    # one, this fails and the server should take a key.
    import inspect

    from trl.generation.vllm_client import VLLMClient

    parameters = set(inspect.signature(VLLMClient.__init__).parameters)
    assert not {p for p in parameters if "key" in p or "token" in p or "auth" in p or "header" in p}, parameters
    assert "Authorization" not in inspect.getsource(VLLMClient)


def test_invoke_serve_publishes_on_loopback_unless_exposed(capsys):
    from hostlab.run.serve import bind_address

    assert bind_address(expose=False) == "127.0.0.1"
    assert "WARNING" not in capsys.readouterr().err
    assert bind_address(expose=True) == "0.0.0.0"
    warning = capsys.readouterr().err
    assert "no authentication" in warning and "weight-transfer endpoints" in warning


def test_compose_publishes_the_server_on_loopback_unless_told(tmp_path):
    from test_compose import needs_compose, render

    from grpolab.common.tracks import get_track
    from hostlab.images.compose import compose_env

    if needs_compose.args[0]:
        pytest.skip(needs_compose.kwargs["reason"])
    env = compose_env(get_track("n"), "grpolab:n", uid_gid=(1234, 2345))
    (port,) = render(env, tmp_path, profiles=("server",))["services"]["vllm"]["ports"]
    assert port["host_ip"] == "127.0.0.1" and port["published"] == "8000"
    (port,) = render(env, tmp_path, {"VLLM_BIND": "0.0.0.0"}, profiles=("server",))["services"]["vllm"]["ports"]
    assert port["host_ip"] == "0.0.0.0"
