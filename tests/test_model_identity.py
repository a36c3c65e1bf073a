"""Which model a run ran: the weights' sha256 and the Hub revision, for the tiny model, a local folder, a model in
the Hugging Face cache (its real on-disk layout, made here) and one not downloaded yet."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from grpolab.model.identity import model_identity, weights_sha256
from grpolab.common.runlog import short_model_identity as short
from grpolab.model.tiny import FIXTURE_SHA256, RECIPE_VERSION

REPO = Path(__file__).resolve().parents[1]
REVISION = "c1899de289a04d12100db370d81485cdf75e47ca"


def test_the_tiny_model_is_named_by_its_committed_weights():
    identity = model_identity("tiny")
    assert identity == {"name": "tiny", "weights_sha256": FIXTURE_SHA256["model.safetensors"], "revision": None,
                        "source": f"committed tiny model (recipe {RECIPE_VERSION})"}
    assert short(identity) == f"tiny (weights {FIXTURE_SHA256['model.safetensors'][:8]})"
    assert short(None, "tiny") == "tiny (weights not recorded)"


def test_a_sharded_folder_is_named_by_the_listing_of_its_shards(tmp_path):
    shards = {"model-00001-of-00002.safetensors": b"first", "model-00002-of-00002.safetensors": b"second"}
    for name, data in shards.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "training_args.bin").write_bytes(b"not weights")
    listing = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(shards.items()))
    assert weights_sha256(tmp_path) == hashlib.sha256(listing.encode()).hexdigest()
    assert model_identity(str(tmp_path))["source"] == "local folder"
    empty = tmp_path / "no-weights"
    empty.mkdir()
    (empty / "training_args.bin").write_bytes(b"not weights")
    assert weights_sha256(empty) is None


def test_a_hub_model_in_the_cache_is_named_by_its_revision_and_blob(tmp_path):
    """The Hugging Face cache as huggingface_hub lays it out: refs/main -> snapshots/<commit>/ whose files link to
    blobs/<sha256>. Read in a process of its own (huggingface_hub reads HF_HUB_CACHE when imported)."""
    repo = tmp_path / "models--Qwen--Qwen3-0.6B"
    weights = b"weights of a model"
    blob = hashlib.sha256(weights).hexdigest()
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / blob).write_bytes(weights)
    (repo / "blobs" / "configblob").write_text(json.dumps({"model_type": "qwen3"}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(Path("../../blobs") / blob)
    (snapshot / "config.json").symlink_to(Path("../../blobs") / "configblob")
    code = ("import json; from grpolab.model.identity import model_identity; "
            "print(json.dumps([model_identity('Qwen/Qwen3-0.6B'), model_identity('Qwen/Qwen3-1.7B')]))")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "entrypoint")}
    cached, absent = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=600
        ).stdout
    )
    assert cached == {
        "name": "Qwen/Qwen3-0.6B",
        "weights_sha256": blob,
        "revision": REVISION,
        "source": "Hugging Face Hub",
    }
    assert short(cached) == f"Qwen/Qwen3-0.6B@{REVISION[:8]} (weights {blob[:8]})"
    assert absent["weights_sha256"] is None and absent["source"] == "Hugging Face Hub, not in the local cache (yet)"
