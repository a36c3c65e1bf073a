"""What the Docker engine holds of an image, as every builder reads it: its id and its layers' diff ids."""

from __future__ import annotations

import json
import subprocess

from ...host.tools import resolved


def engine_layers(name: str) -> list[str]:
    """The image's layers' diff ids as the engine holds them, bottom first."""
    out = subprocess.run(resolved(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", name]),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def engine_image_id(name: str) -> str:
    out = subprocess.run(
        resolved(["docker", "image", "inspect", "--format", "{{.Id}}", name]), capture_output=True, text=True
    )
    return out.stdout.strip() if out.returncode == 0 else ""
