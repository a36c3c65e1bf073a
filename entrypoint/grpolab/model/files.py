"""A model's files checked before anything loads them, so that a broken download is named instead of surfacing as
a loader's error: each safetensors file's size against what its header promises, config.json and the tokenizer's
files as JSON, the shards a safetensors index lists, and, in the Hugging Face cache, each blob against the sha256
that is its name. A broken file is one [input] line: the file, what is wrong, and the command that gets it again.

What is checked costs little but the blobs' sha256: reading every byte of the weights (docs/faults.md, "Faults of
files and machines", gives the cost per GB measured here). It is the same hash the run records as the weights'
identity (grpolab.model.identity), taken once per process, so a Hub model costs it once per run.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from ..common.errors import LayerFailure
from ..common.filehash import file_sha256
from .identity import HUB_CACHE_FOLDER, SHA256_NAME, hub_snapshot

# The JSON files a loader reads (transformers: the config and generation config; tokenizers: tokenizer.json and its
# config; the index of a sharded checkpoint). Each one present must parse.
JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors.index.json",
)
SAFETENSORS_HEADER_LIMIT_BYTES = (
    100 << 20
)  # safetensors itself refuses a header over 100 MB: such a length is not a header


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file, judged from its header alone (never its tensors): None when its size is
    exactly what the header promises (8 bytes of header length, the header, then the last tensor's end)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size < 8:
            return f"{size} bytes: shorter than the 8-byte header length every safetensors file starts with"
        header_bytes = int.from_bytes(handle.read(8), "little")
        if header_bytes > SAFETENSORS_HEADER_LIMIT_BYTES:
            return (f"its first 8 bytes give a header of {header_bytes:,} bytes, which no safetensors file has: not a "
                    "safetensors file, or damaged")
        if 8 + header_bytes > size:
            return (f"{size:,} bytes, but its header alone promises {8 + header_bytes:,}: cut short (an interrupted "
                    "download or copy)")
        header = handle.read(header_bytes)
    try:
        tensors = {name: entry for name, entry in json.loads(header).items() if name != "__metadata__"}
        data_bytes = max((int(entry["data_offsets"][1]) for entry in tensors.values()), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return ("its header is not the JSON table of tensors a safetensors file starts with: damaged, or not a "
                "safetensors file")
    promised = 8 + header_bytes + data_bytes
    if size < promised:
        return f"{size:,} bytes, but its header promises {promised:,}: cut short (an interrupted download or copy)"
    if size > promised:
        return (f"{size:,} bytes, but its header promises {promised:,}: {size - promised:,} bytes too many (damaged, "
                "or two files run together)")
    return None


def json_problem(path: Path) -> str | None:
    """What is wrong with a JSON file a loader reads: empty, not UTF-8, or not JSON (with the line and column)."""
    raw = path.read_bytes()
    if not raw.strip():
        return f"empty ({len(raw)} bytes): cut short, or never written"
    try:
        json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        return f"not UTF-8 text (byte {error.start}), so not JSON: damaged"
    except json.JSONDecodeError as error:
        return (f"not valid JSON at line {error.lineno}, column {error.colno} ({error.msg}; {len(raw):,} bytes): cut "
                "short or damaged")
    return None


def blob_problem(path: Path) -> str | None:
    """A file of the Hugging Face cache whose blob is named by a sha256 (the Hub's LFS files: weights, large
    tokenizers): its content must have that sha256. A link to a blob that is gone is named too."""
    target = path.resolve()
    if SHA256_NAME.match(target.name) and target.parent.name == "blobs":
        actual = file_sha256(path)
        if actual != target.name:
            return (
                f"its content has sha256 {actual}, not the {target.name} its blob is named after (the Hub's hash of "
                "the file): "
                "damaged on disk or in the download"
            )
    return None


def file_problems(folder: Path) -> list[tuple[Path, str]]:
    """(file, what is wrong) for every file of the model folder a loader would trip on; empty when all are sound."""
    problems = []
    in_hub_cache = is_hub_snapshot(folder)
    index = folder / "model.safetensors.index.json"
    for path in sorted(folder.iterdir()):
        try:
            if in_hub_cache and path.is_symlink() and not path.exists():
                problem = f"a link to {path.resolve()}, which is not there (the cache lost the blob)"
            elif path.suffix == ".safetensors":
                problem = safetensors_problem(path)
            elif path.name in JSON_FILES:
                problem = json_problem(path)
            else:
                problem = None
            if (
                problem is None and in_hub_cache and path.is_symlink()
            ):  # the size and the format first: they cost nothing
                problem = blob_problem(path)
        except OSError as error:  # unreadable: permissions, an I/O error of the disk
            problem = f"unreadable ({error.strerror or error})"
        if problem:
            problems.append((path, problem))
    if index.is_file() and not any(path == index for path, _ in problems):
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        problems += [
            (folder / shard, f"missing: {index.name} lists it as a shard of the weights")
            for shard in shards
            if not (folder / shard).exists()
        ]
    return problems


def is_hub_snapshot(folder: Path) -> bool:
    return folder.parent.name == "snapshots" and HUB_CACHE_FOLDER.match(folder.parent.parent.name) is not None


def hub_id_and_revision(folder: Path) -> tuple[str, str | None]:
    """("org/name", the snapshot's commit unless refs/main points to it) of a folder in the Hugging Face cache."""
    repo = folder.parent.parent
    match = HUB_CACHE_FOLDER.match(repo.name)
    try:
        main = (repo / "refs" / "main").read_text().strip()
    except OSError:
        main = None
    return f"{match['org']}/{match['name']}", (None if folder.name == main else folder.name)


def download_again(folder: Path, model: str) -> str:
    """What to do about a broken file: the command that downloads the model again, for the cache or for a folder."""
    if is_hub_snapshot(folder):
        hub_id, revision = hub_id_and_revision(folder)
        command = f"hf download {hub_id}" + (f" --revision {revision}" if revision else "") + " --force-download"
        return (
            f"download it again where the Hub is reachable: `{command}` (it replaces the cache's copy), then run again"
        )
    return (
        "replace the folder's broken file(s) with a whole copy: download the model again into it (`hf download "
        "ORG/NAME "
        f"--local-dir {model} --force-download`, ORG/NAME being where it came from) or copy it again from where it "
        "came, then run again"
    )


def model_folder(model: str, model_path: str) -> Path | None:
    """The folder whose files the loader reads: the local folder, or the Hub model's snapshot once it is cached (None
    before)."""
    if Path(model_path).expanduser().is_dir():
        return Path(model_path).expanduser()
    return hub_snapshot(model_path)


HUB_PROBE_TIMEOUT_S = 5.0


def check_hub_reachable(model: str, model_path: str) -> None:
    """A Hub model not in the cache, with the Hub unreachable, refused at once in one [input] line: huggingface_hub
    would retry each file 5 times with backoff (about 36 lines over 72 s, measured in grpolab:c without a route to the
    Hub) before the same failure. One request, HUB_PROBE_TIMEOUT_S; any HTTP answer counts as reachable (a private or
    unknown model is the loader's to name)."""
    if model_folder(model, model_path) is not None or os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/api/models/{model_path}", method="HEAD"),
                               timeout=HUB_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        cache = os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))
        raise LayerFailure(
            "input",
            f"model {model!r} is not in the Hugging Face cache here ({cache}) and the Hub ({endpoint}) cannot be "
            f"reached ({reason})",
            f"download it where the Hub is reachable (`hf download {model_path}`, into this cache: in the image, the "
            "cache volume), set HF_ENDPOINT to a mirror, or use --model tiny, the built-in model",
        ) from None


def check_model_files(model: str, model_path: str) -> None:
    """The input layer's refusal of a model folder (or cached Hub snapshot) with a broken file: one [input] message
    naming each broken file and what is wrong, with the command that gets it again. A Hub model not yet downloaded
    has nothing to check (the run checks it again once it has loaded)."""
    folder = model_folder(model, model_path)
    if folder is None:
        return
    problems = file_problems(folder)
    if problems:
        named = "; ".join(
            f"{path} is {what}" if not what.startswith(("its ", "a link")) else f"{path}: {what}"
            for path, what in problems
        )
        raise LayerFailure(
            "input",
            f"model {model!r} has {'a broken file' if len(problems) == 1 else f'{len(problems)} broken files'}: "
            f"{named}",
            download_again(folder, model),
        )
