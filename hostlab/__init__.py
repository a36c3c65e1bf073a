"""Host-side tooling: locks, images, Compose and venvs for the tracks in images/tracks.toml.

Everything here runs on the user's machine (or CI), never inside an image; it knows Docker and uv, not TRL.
`tasks.py` at the repository root is a table of contents over these modules.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The host side imports only the lab's two shared packages, both light: grpolab.common (the track table's reader, so
# both sides read the same rows; the run log's reader; the server health wait; a file's sha256; the kernels table)
# and grpolab.report. Anything else it asks of the lab through a `grpolab` command. tests/test_boundary.py holds it to
# that.
if str(REPO / "entrypoint") not in sys.path:
    sys.path.insert(0, str(REPO / "entrypoint"))


from grpolab.common.tracks import TracksFileError, UnknownTrack  # noqa: E402, F401  (re-exported: tasks report them like a HostError)


class HostError(Exception):
    """A problem the user can act on: the message says what failed and what to do next."""
