"""The doctor's common ground: the three verdicts, the Context every item is judged from (doctor.gather reads it
once), and item(), the one shape every item returns (an item of doctor.schema.json)."""

from __future__ import annotations

from dataclasses import dataclass

from .machine import HostFacts
from .torch_build import Devices, TorchBuild

OK, WARN, FAIL = "ok", "warn", "fail"


# --- what every item is judged from ---------------------------------------------------------------------


@dataclass
class Context:
    track: object  # tracks.Track, or None when the table can't be read
    build: TorchBuild
    devices: Devices
    host: HostFacts
    fingerprint: dict
    rollout: str  # the rollout path the lab would take
    server_url: str | None  # checked when server mode is configured


def item(name: str, status: str, summary: str, action: str = "", **details) -> dict:
    return {"name": name, "status": status, "summary": summary, "action": action, "details": details}
