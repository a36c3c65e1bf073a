"""Which model a run ran, exactly: the name it was given, the sha256 of its weights, and the Hub revision where
one is known. Every run-log line carries it (`model_identity`), and `grpolab report` keeps runs of different
weights in different rows: two models called "tiny", or one Hub id at two revisions, are not the same model.

The weights' sha256: of the one weights file (model.safetensors, pytorch_model.bin), or, for a model in several
shards, of the `sha256sum`-style listing "<sha256>  <file name>\n" of every shard in name order. In the Hugging
Face cache a weights file is a link to blobs/<its sha256> (the Hub's LFS object id): it is hashed all the same, since a
blob's name says what it should hold, not what it holds (grpolab.model.files refuses a blob that does not match it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..common.filehash import weights_sha256
from .tiny import RECIPE_VERSION, tiny_model_dir

SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
HUB_CACHE_FOLDER = re.compile(r"^models--(?P<org>[^/]+?)--(?P<name>.+)$")


def hub_snapshot(name: str) -> Path | None:
    """The Hugging Face cache's snapshot folder of Hub id `name` at the revision `main` points to, if cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a valid Hub id, or an unreadable cache: no revision known
        return None
    return Path(found).parent if isinstance(found, str) else None


def revision_of(folder: Path) -> str | None:
    """The Hub commit of a folder inside the Hugging Face cache (…/models--org--name/snapshots/<commit>/), or
    the `_commit_hash` a config.json may carry."""
    folder = Path(folder)
    if folder.parent.name == "snapshots" and HUB_CACHE_FOLDER.match(folder.parent.parent.name):
        return folder.name
    try:
        return json.loads((folder / "config.json").read_text()).get("_commit_hash")
    except (OSError, ValueError, AttributeError):
        return None


def model_identity(name: str) -> dict:
    """{"name", "weights_sha256", "revision", "source"} of the model `name` (tiny, a folder, or a Hub id). Never
    raises: what cannot be known (a Hub model not downloaded yet, an unreadable file) is None, with the reason."""
    identity = {"name": name, "weights_sha256": None, "revision": None, "source": None}
    try:
        if name == "tiny":
            folder, identity["source"] = tiny_model_dir(), f"committed tiny model (recipe {RECIPE_VERSION})"
        elif Path(name).expanduser().is_dir():
            folder, identity["source"] = Path(name).expanduser(), "local folder"
        else:
            folder, identity["source"] = hub_snapshot(name), "Hugging Face Hub"
            if folder is None:
                identity["source"] = "Hugging Face Hub, not in the local cache (yet)"
                return identity
        identity["weights_sha256"] = weights_sha256(folder)
        identity["revision"] = revision_of(folder)
    except OSError as error:
        identity["source"] = f"{identity['source']}; unreadable ({error.strerror or error})"
    return identity
