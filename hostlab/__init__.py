"""Host-side tooling: locks, images, Compose and venvs for the tracks in images/tracks.toml.

Everything here runs on the user's machine (or CI), never inside an image; it knows Docker and uv, not TRL.
`tasks.py` at the repository root is a table of contents over these modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The host side imports only what it shares with the lab, all light: the track table's reader (grpolab.common.tracks,
# so both sides read the same rows), the run log's reader (grpolab.common.runlog), the report (grpolab.report.table), the
# server health wait (grpolab.common.health) and a file's sha256 (grpolab.common.filehash). tests/test_boundary.py holds it to that.
if str(REPO / "entrypoint") not in sys.path:
    sys.path.insert(0, str(REPO / "entrypoint"))


from grpolab.common.tracks import TracksFileError, UnknownTrack  # noqa: E402, F401  (re-exported: tasks report them like a HostError)


class HostError(Exception):
    """A problem the user can act on: the message says what failed and what to do next."""
