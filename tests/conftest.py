"""Shared test set-up: the package under entrypoint/ is imported from the working tree."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "entrypoint"))
