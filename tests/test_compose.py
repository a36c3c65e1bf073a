"""Compose: `docker compose config` renders for every container track with the right device access, the
host user's ids, runs/ and the cache volume; .env keeps what `invoke build` doesn't own."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # hostlab/ (host-side code) at the repo root

from grpolab.common.tracks import load_tracks  # noqa: E402

from hostlab import REPO  # noqa: E402
from hostlab.host.runs import image_runs_dir  # noqa: E402
from hostlab.images.compose import compose_env, read_env_file, recorded_track, write_env_file  # noqa: E402

CONTAINER_TRACKS = [t for t in load_tracks().values() if t.is_container]
SERVICES = {"lab": ["lab", "--smoke", "always"], "smoke": ["smoke"], "doctor": ["doctor"]}


def have_compose() -> bool:
    return (
        shutil.which("docker") is not None
        and subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=600).returncode == 0
    )


needs_compose = pytest.mark.skipif(not have_compose(), reason="no `docker compose` CLI (Compose v2) on this machine")


def render(env: dict, tmp_path: Path, shell_env: dict | None = None, profiles: tuple[str, ...] = ()) -> dict:
    """`docker compose config` from the repository root with `env` as its .env (COMPOSE_FILE included)."""
    env_file = tmp_path / "env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    clean = {
        k: v for k, v in __import__("os").environ.items() if not k.startswith(("COMPOSE_", "LAB_", "HF_TOKEN", "VLLM_"))
    }
    flags = [arg for profile in profiles for arg in ("--profile", profile)]
    proc = subprocess.run(
        ["docker", "compose", "--env-file", str(env_file), *flags, "config", "--format", "json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**clean, **(shell_env or {})},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_compose
@pytest.mark.parametrize("track", CONTAINER_TRACKS, ids=lambda t: t.name)
def test_compose_config_renders_per_track(track, tmp_path, monkeypatch):
    monkeypatch.setattr("hostlab.images.compose.device_gids", lambda: {"VIDEO_GID": "44", "RENDER_GID": "993"})
    env = compose_env(track, f"grpolab:{track.name}", uid_gid=(1234, 2345))
    config = render(env, tmp_path)
    assert set(config["services"]) == set(SERVICES)
    for name, command in SERVICES.items():
        svc = config["services"][name]
        assert svc["image"] == f"grpolab:{track.name}" and svc["command"] == command
        assert svc["user"] == "1234:2345"
        mounts = {m["target"]: m for m in svc["volumes"]}
        assert mounts["/work/runs"]["type"] == "bind" and Path(mounts["/work/runs"]["source"]) == image_runs_dir()
        assert mounts["/cache"]["type"] == "volume"
        devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if track.device_access == "nvidia":
            assert (
                devices == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
                or devices[0]["driver"] == "nvidia"
            )
        else:
            assert not devices
        if track.device_access == "rocm":
            assert {d["source"] for d in svc["devices"]} == {"/dev/kfd", "/dev/dri"}
            assert svc["group_add"] == ["44", "993"]
            assert "seccomp=unconfined" in svc["security_opt"] and svc["ipc"] == "host"
        else:
            assert "devices" not in svc and "group_add" not in svc


@needs_compose
@pytest.mark.parametrize("track", CONTAINER_TRACKS, ids=lambda t: t.name)
def test_vllm_server_services_only_where_server_mode_runs(track, tmp_path, monkeypatch):
    monkeypatch.setattr("hostlab.images.compose.device_gids", lambda: {"VIDEO_GID": "44", "RENDER_GID": "993"})
    env = compose_env(track, f"grpolab:{track.name}", uid_gid=(1234, 2345))
    services = render(env, tmp_path, profiles=("server",))["services"]
    if track.name not in ("s", "n", "cv"):  # no vLLM in the image
        assert set(services) == set(SERVICES)
        return
    server, lab = services["vllm"], services["lab-server"]
    assert server["image"] == lab["image"] == f"grpolab:{track.name}" and server["user"] == "1234:2345"
    assert server["command"][0] == "serve"
    assert server["ports"][0]["host_ip"] == "127.0.0.1"  # loopback only
    if track.name == "cv":  # vLLM's CPU build: no GPU to reserve, no NCCL to share memory with
        assert "deploy" not in server and "deploy" not in lab and "ipc" not in server
        return
    assert server["ipc"] == "host"
    assert server["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1"]
    assert server["ports"][0]["published"] == "8000" and server["ports"][0]["target"] == 8000
    assert "/health" in " ".join(server["healthcheck"]["test"])
    assert lab["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert lab["command"][-4:] == ["--rollout", "vllm-server", "--vllm-server-url", "http://vllm:8000"]
    assert lab["deploy"]["resources"]["reservations"]["devices"][0]["count"] == -1  # the trainer sees every GPU
    # `invoke serve --gpu 2 --port 8011`
    moved = render(env, tmp_path, {"VLLM_GPU": "2", "VLLM_PORT": "8011"}, profiles=("server",))["services"]["vllm"]
    assert moved["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["2"]
    assert moved["ports"][0]["published"] == "8011"


@needs_compose
def test_hf_token_goes_to_every_service_as_a_file_never_as_a_variable(tmp_path):
    env = compose_env(load_tracks()["n"], "grpolab:n", uid_gid=(1000, 1000))
    for shell, content in (({}, "\n"), ({"HF_TOKEN": "hf_test"}, "hf_test\n")):
        config = render(env, tmp_path, shell, profiles=("server",))
        assert config["configs"]["hf_token"]["content"] == content  # never empty: an empty one arrives as a directory
        for name, service in config["services"].items():
            assert "HF_TOKEN" not in service["environment"], name
            assert service["environment"]["HF_TOKEN_PATH"] == "/run/secrets/hf_token", name
            assert service["configs"] == [{"source": "hf_token", "target": "/run/secrets/hf_token"}], name


@needs_compose
def test_ca_bundle_is_mounted_read_only(tmp_path):
    bundle = tmp_path / "ca.crt"
    bundle.write_text("not a real bundle\n")
    env = compose_env(load_tracks()["c"], "grpolab:c", ca_bundle=bundle, uid_gid=(1000, 1000))
    svc = render(env, tmp_path)["services"]["smoke"]
    mount = next(m for m in svc["volumes"] if m["target"] == "/etc/grpolab/ca-bundle.crt")
    assert mount["source"] == str(bundle) and mount["read_only"]
    assert svc["environment"]["SSL_CERT_FILE"] == "/etc/grpolab/ca-bundle.crt"


@needs_compose
def test_without_a_build_compose_says_what_to_do(tmp_path):
    (tmp_path / "empty").write_text("")
    proc = subprocess.run(
        ["docker", "compose", "-f", "compose/base.yaml", "--env-file", str(tmp_path / "empty"), "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={k: v for k, v in __import__("os").environ.items() if not k.startswith(("COMPOSE_", "LAB_"))},
        timeout=600,
    )
    assert proc.returncode != 0 and "invoke build" in proc.stderr


def test_env_file_keeps_foreign_lines(tmp_path):
    path = tmp_path / ".env"
    path.write_text("HF_TOKEN=hf_mine\nLAB_IMAGE=old\n")
    write_env_file(compose_env(load_tracks()["c"], "grpolab:c", uid_gid=(1, 2)), path)
    text = path.read_text()
    assert "HF_TOKEN=hf_mine" in text and "LAB_IMAGE=grpolab:c" in text and "LAB_IMAGE=old" not in text
    assert "COMPOSE_FILE=compose/base.yaml\n" in text and "LAB_UID=1\n" in text
    write_env_file(compose_env(load_tracks()["n"], "grpolab:n", uid_gid=(1, 2)), path)
    assert "COMPOSE_FILE=compose/base.yaml:compose/nvidia.yaml" in path.read_text()
    assert path.read_text().count("LAB_TRACK=") == 1
    assert path.read_text().count("# Written by") == 1  # one header, however many builds
    assert recorded_track(path) == "n" and read_env_file(path)["HF_TOKEN"] == "hf_mine"
    assert recorded_track(tmp_path / "missing.env") is None
