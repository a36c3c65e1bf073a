"""The .env that ties `docker compose` to the image last built: which compose files, which image, whose ids.

`docker compose` reads .env from the directory it runs in (the repository root): COMPOSE_FILE selects
compose/base.yaml plus the file for the track's device access (compose/<device_access>.yaml), for tracks with
vLLM compose/vllm-server.yaml (server mode: `invoke serve`, `docker compose run lab-server`; NVIDIA tracks also
compose/vllm-server-nvidia.yaml, the server's and the trainer's GPUs) and, when a CA bundle was given,
compose/ca.yaml.
"""

from __future__ import annotations

from pathlib import Path

from grpolab.common.tracks import Track

from .. import REPO
from ..host.detect import device_gids, host_user_ids
from ..locks.resolve import runs_lab, uses_vllm

ENV_FILE = REPO / ".env"
# The keys `invoke build` owns in .env; other lines (say a user's HF_TOKEN) are kept as they are.
OWNED = (
    "COMPOSE_FILE",
    "LAB_IMAGE",
    "LAB_IMAGE_NAME",
    "LAB_IMAGE_REPO_DIGEST",
    "LAB_TRACK",
    "LAB_UID",
    "LAB_GID",
    "VIDEO_GID",
    "RENDER_GID",
    "LAB_CA_BUNDLE",
)


def serves_vllm(track: Track) -> bool:
    """Can the track's image start a vLLM server for the lab? Its lock has vLLM and TRL (on a CPU, vLLM's CPU build:
    the server runs and generates, though TRL's weight transfer, NCCL, needs CUDA GPUs: syncs_with_server). verl's
    tracks have vLLM but start it themselves."""
    return uses_vllm(track.lock_inputs) and runs_lab(track)


def syncs_with_server(track: Track) -> bool:
    """Can a trainer of this track stream its weights into a vLLM server? TRL does it with NCCL: CUDA GPUs."""
    return serves_vllm(track) and track.device_access == "nvidia"


def compose_files(track: Track, ca_bundle: Path | None = None, repo: Path = REPO) -> list[str]:
    files = ["compose/base.yaml"]
    if (repo / "compose" / f"{track.device_access}.yaml").exists():
        files.append(f"compose/{track.device_access}.yaml")
    if serves_vllm(track):
        files.append("compose/vllm-server.yaml")
    if syncs_with_server(track):
        files.append("compose/vllm-server-nvidia.yaml")
    if ca_bundle:
        files.append("compose/ca.yaml")
    return files


def compose_env(
    track: Track, image: str, ca_bundle: Path | None = None, repo: Path = REPO, uid_gid: tuple[int, int] | None = None,
    image_id: str = "", repo_digest: str = "",
) -> dict[str, str]:
    """.env's keys for `image`. With `image_id`, Compose runs the image by its id (LAB_IMAGE), so the id the lab records
    is the id of what runs, even after the tag moves on to a newer build; LAB_IMAGE_NAME keeps the tag for people."""
    uid, gid = uid_gid or host_user_ids()
    env = {
        "COMPOSE_FILE": ":".join(compose_files(track, ca_bundle, repo)),
        "LAB_IMAGE": image_id or image,
        "LAB_IMAGE_NAME": image,
        **({"LAB_IMAGE_REPO_DIGEST": repo_digest} if repo_digest else {}),
        "LAB_TRACK": track.name,
        "LAB_UID": str(uid),
        "LAB_GID": str(gid),
    }
    if track.device_access == "rocm":
        env.update(device_gids())
    if ca_bundle:
        env["LAB_CA_BUNDLE"] = str(Path(ca_bundle).resolve())
    return env


def _key(line: str) -> str:
    return line.split("=", 1)[0].strip()


def read_env_file(path: Path = ENV_FILE) -> dict[str, str]:
    """The KEY=VALUE lines of .env (comments and blank lines skipped)."""
    if not path.exists():
        return {}
    lines = [line for line in path.read_text().splitlines() if "=" in line and not line.lstrip().startswith("#")]
    return {_key(line): line.split("=", 1)[1].strip() for line in lines}


def recorded_track(path: Path = ENV_FILE) -> str | None:
    """The track whose image `invoke build` last recorded for `docker compose`, if any."""
    return read_env_file(path).get("LAB_TRACK") or None


def write_env_file(values: dict[str, str], path: Path = ENV_FILE) -> Path:
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            if _key(line) not in OWNED and not line.startswith("# Written by `invoke build"):
                kept.append(line)
    lines = [f"# Written by `invoke build --track {values['LAB_TRACK']}`: the keys below are rewritten by each build."]
    lines += [f"{k}={v}" for k, v in values.items()] + kept
    replace_atomically(path, "\n".join(lines) + "\n")
    return path


def replace_atomically(path: Path, text: str) -> None:
    """Write a sibling temporary file, then rename it over `path`: Ctrl-C, a full disk or a second build at the
    same moment leaves either the old .env or the new one, never half of one (`docker compose` reads it whole)."""
    import os
    import tempfile

    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o777)  # .env may hold HF_TOKEN: keep its mode
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
