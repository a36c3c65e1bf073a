"""Convert the policy to GGUF, the file llama.cpp samples from.

llama.cpp's own converter (`convert_hf_to_gguf.py`, its `conversion/` package and `gguf-py/`) is used as a
library, not copied: it ships inside the llama-cpp-python sdist (vendor/llama.cpp/) but is not installed
with the package. `converter_dir()` finds it, in this order:

1. `GRPOLAB_LLAMACPP_CONVERTER`: a folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/;
2. `cache_dir()/llama.cpp-converter/<version>/`, extracted earlier;
3. extracted from the sdist in `GRPOLAB_SDIST_DIR` (the images keep there the sdist they compiled, which
   the build's pip checked against the lock), or from `cache_dir()/sdist/` or `~/.cache/grpolab/sdist/`
   (kept from the wheel build), whose sha256 must be one the track's lock lists for it;
4. the sdist fetched from PyPI (`pip download --require-hashes`, ~76 MB) only with the track's lock's hash
   (lockfiles/<track>.txt, or GRPOLAB_LOCK_FILE), then extracted. A version the lock does not pin is
   refused, with the command that would add it. Nothing else is downloaded.

<version> is the installed llama-cpp-python's version (else LLAMA_CPP_PYTHON_VERSION), so the converter
and the runtime come from the same llama.cpp commit.

One decision is ours: llama.cpp names a BPE tokenizer's pre-tokenizer by hashing the ids a fixed text
encodes to, and refuses hashes it does not know. The built-in tiny model's tokenizer is trained here, so
its hash is new, but it splits text with exactly Qwen2's pre-tokenizer (the same Split regex, then
byte-level). For such a tokenizer, and only then, we answer "qwen2". Known tokenizers keep the
converter's own answer.
"""

from __future__ import annotations

import copy
import errno
import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from ..common.errors import LayerFailure
from ..common.filehash import sha256_of_file
from ..common.paths import cache_dir

HOME_CACHE = Path.home() / ".cache" / "grpolab"  # cache_dir()'s default
LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist our converter comes from when llama-cpp-python is absent
LOCK_FILE_ENV = "GRPOLAB_LOCK_FILE"  # the lock to take the sdist's hash from (default: lockfiles/<track>.txt)
CONVERTER_ENV = "GRPOLAB_LLAMACPP_CONVERTER"
SDIST_DIR_ENV = "GRPOLAB_SDIST_DIR"  # a read-only folder of sdists (the images': /opt/grpolab/sdist)
# What we take out of the sdist, relative to vendor/llama.cpp/.
CONVERTER_MEMBERS = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/gguf/")

# Qwen2's pre-tokenizer regex, as its tokenizer.json writes it (llama.cpp's "qwen2" pre-tokenizer).
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GGUF_MAGIC = b"GGUF"
OUTTYPES = ("f32", "f16", "bf16")

log = logging.getLogger(__name__)


# --- Finding the converter -------------------------------------------------------------------------


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version, else the one we pin the converter to."""
    try:
        from importlib.metadata import version

        return version("llama_cpp_python")
    except Exception:  # noqa: BLE001 - not installed
        return LLAMA_CPP_PYTHON_VERSION


def sdist_path(version: str | None = None) -> Path:
    version = version or llama_cpp_version()
    return cache_dir() / "sdist" / f"llama_cpp_python-{version}.tar.gz"


def _is_converter(path: Path) -> bool:
    return (
        (path / "convert_hf_to_gguf.py").is_file()
        and (path / "conversion" / "__init__.py").is_file()
        and (path / "gguf-py" / "gguf").is_dir()
    )


def lock_file() -> Path:
    """The track's lock: GRPOLAB_LOCK_FILE, else lockfiles/<track>.txt beside the tracks table."""
    from ..common.tracks import TRACKS_FILE, current_track_name

    configured = os.environ.get(LOCK_FILE_ENV)
    return Path(configured) if configured else TRACKS_FILE.parent.parent / "lockfiles" / f"{current_track_name()}.txt"


def locked_sdist_hashes(version: str) -> list[str]:
    """The sha256s the track's lock lists for llama-cpp-python==version; refused (rollout) when the lock is
    missing or pins another version, with the command that would add it."""
    import re

    from ..common.tracks import current_track_name

    lock, track = lock_file(), current_track_name()
    if not lock.is_file():
        raise LayerFailure(
            "rollout",
            f"no lock to take llama-cpp-python's sdist hash from ({lock} does not exist): "
            "an sdist is only fetched with a hash from the lock",
            f"run it from the repository (lockfiles/{track}.txt), or set {LOCK_FILE_ENV} to the track's lock",
        )
    pinned, hashes, inside = None, [], False
    for line in lock.read_text().splitlines():
        if re.match(r"llama[-_.]cpp[-_.]python==", line, re.IGNORECASE):
            pinned, inside = line.split("==", 1)[1].split()[0], True
        elif inside and line.strip().startswith("--hash=sha256:"):
            hashes.append(line.strip().split(":", 1)[1].rstrip(" \\"))
        else:
            inside = inside and not re.match(r"[A-Za-z0-9]", line)
    if pinned != version or not hashes:
        raise LayerFailure(
            "rollout",
            f"{lock} pins llama-cpp-python {pinned or 'not at all'}, not {version}: refusing to fetch or use "
            "an sdist without the lock's hash for it",
            f"lock it: add \"llamacpp\" to track {track}'s extras in images/tracks.toml (pyproject.toml's llamacpp "
            "extra "
            f"says which version), then run `invoke lock --track {track}`",
        )
    return hashes


def verify_sdist(sdist: Path, version: str) -> None:
    """The image's kept sdist was checked against the lock when the image was built; any other must match it now."""
    kept = os.environ.get(SDIST_DIR_ENV)
    if kept and sdist.parent == Path(kept):
        return
    expected = locked_sdist_hashes(version)
    found = sha256_of_file(sdist)
    if found not in expected:
        raise LayerFailure(
            "rollout",
            f"{sdist} has sha256 {found}, not the lock's {', '.join(expected)} for llama-cpp-python {version}",
            "delete it; it is fetched again from PyPI with the lock's hash",
        )


WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # only ever from writing


def _writing(error: OSError, folder: Path) -> bool:
    """Did `error` come from writing into `folder` (full, over a size limit, read-only, not ours) rather than
    from reading the sdist?"""
    in_folder = bool(error.filename) and str(error.filename).startswith(str(folder))
    return error.errno in WRITE_ERRNOS or (error.errno in (errno.EACCES, errno.EPERM) and in_folder)


def extract_converter(sdist: Path, out_dir: Path) -> Path:
    """Copy llama.cpp's converter out of a llama-cpp-python sdist into out_dir (atomically)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".converter-", dir=out_dir.parent))
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            for member in archive:
                parts = member.name.split("/", 1)  # "llama_cpp_python-0.3.36/vendor/llama.cpp/..."
                if len(parts) < 2 or not parts[1].startswith("vendor/llama.cpp/"):
                    continue
                relative = parts[1][len("vendor/llama.cpp/") :]
                if not member.isfile() or not any(
                    relative == m or (m.endswith("/") and relative.startswith(m)) for m in CONVERTER_MEMBERS
                ):
                    continue
                if "__pycache__" in relative:
                    continue
                target = staging / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink)
        if not _is_converter(staging):
            raise LayerFailure(
                "rollout",
                f"{sdist} does not carry llama.cpp's converter (vendor/llama.cpp/convert_hf_to_gguf.py, conversion/, "
                "gguf-py/)",
                f"delete it and let grpolab fetch llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}'s sdist again",
            )
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except (tarfile.TarError, OSError, EOFError) as error:
        if isinstance(error, OSError) and _writing(error, out_dir.parent):
            raise LayerFailure(
                "rollout",
                f"could not write llama.cpp's converter into {out_dir.parent} ({error.strerror}); nothing half-written "
                "was kept",
                f"free space or fix the permissions where the cache lives (`df -h {out_dir.parent}`), or point "
                "GRPOLAB_CACHE_DIR elsewhere",
            ) from error
        raise LayerFailure(
            "rollout",
            f"could not read llama.cpp's converter from {sdist}: {error}",
            "delete the file; it is fetched again from PyPI",
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def download_sdist(version: str, progress=print) -> Path:
    """Fetch llama-cpp-python's sdist from PyPI with pip (the only network this module uses)."""
    target = sdist_path(version)
    target.parent.mkdir(parents=True, exist_ok=True)
    progress(f"fetching llama-cpp-python=={version} sdist from PyPI for llama.cpp's GGUF converter (~76 MB, once)")
    requirement = f"llama-cpp-python=={version}" + "".join(f" --hash=sha256:{h}" for h in locked_sdist_hashes(version))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write(requirement + "\n")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--require-hashes",
        "-r",
        req.name,
        "-d",
        str(target.parent),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    finally:
        os.unlink(req.name)
    if result.returncode != 0 or not target.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise LayerFailure(
            "rollout",
            f"could not fetch llama-cpp-python=={version}'s sdist, which carries llama.cpp's GGUF converter: "
            f"{' | '.join(tail)}",
            f"where PyPI is reachable run `python -m grpolab.model.gguf converter` (it fetches with the lock's hash), "
            f"or point {CONVERTER_ENV} at a folder with convert_hf_to_gguf.py, conversion/ and gguf-py/",
        )
    return target


def converter_dir(version: str | None = None, download: bool = True, progress=print) -> Path:
    """The folder holding llama.cpp's converter (see the module docstring for the search order)."""
    configured = os.environ.get(CONVERTER_ENV)
    if configured:
        path = Path(configured)
        if not _is_converter(path):
            raise LayerFailure(
                "rollout",
                f"{CONVERTER_ENV}={configured} does not hold convert_hf_to_gguf.py, conversion/ and gguf-py/",
                f"unset it, or run `python -m grpolab.model.gguf converter --into {configured}`",
            )
        return path
    version = version or llama_cpp_version()
    extracted = cache_dir() / "llama.cpp-converter" / version
    if _is_converter(extracted):
        return extracted
    sdist = sdist_path(version)
    kept = [Path(os.environ[SDIST_DIR_ENV]) / sdist.name] if os.environ.get(SDIST_DIR_ENV) else []
    shared = (
        HOME_CACHE / "sdist" / sdist.name
    )  # the wheel build's copy, when GRPOLAB_CACHE_DIR points elsewhere (tests)
    sdist = next((path for path in [sdist, *kept, shared] if path.is_file()), sdist)
    if not sdist.is_file():
        if not download:
            raise LayerFailure(
                "rollout",
                f"llama.cpp's GGUF converter is not here: no {extracted} and no {sdist}",
                f"run `python -m grpolab.model.gguf converter` where PyPI is reachable, or set {CONVERTER_ENV}",
            )
        download_sdist(version, progress)
    verify_sdist(sdist, version)
    progress(f"extracting llama.cpp's converter from {sdist.name} into {extracted}")
    return extract_converter(sdist, extracted)


@contextmanager
def _converter_on_path(path: Path):
    """Import llama.cpp's `conversion` and `gguf` from `path` (its own gguf-py, same commit)."""
    added = [str(path / "gguf-py"), str(path)]
    for entry in reversed(added):
        sys.path.insert(0, entry)
    try:
        gguf_module = sys.modules.get("gguf")
        if gguf_module is not None and not str(getattr(gguf_module, "__file__", "")).startswith(str(path)):
            # Another gguf (e.g. PyPI's) was imported first; the converter needs the one from its own commit.
            for name in [n for n in sys.modules if n == "gguf" or n.startswith("gguf.")]:
                del sys.modules[name]
        yield importlib.import_module("conversion"), importlib.import_module("gguf")
    finally:
        for entry in added:
            if entry in sys.path:
                sys.path.remove(entry)


# --- The tokenizer decision ------------------------------------------------------------------------


def uses_qwen2_pretokenizer(model_dir: Path) -> bool:
    """True when tokenizer.json splits text exactly as Qwen2's does: its Split regex, then byte-level."""
    try:
        spec = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return False
    if spec.get("model", {}).get("type") != "BPE":
        return False
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        split.get("type") == "Split"
        and split.get("pattern", {}).get("Regex") == QWEN2_SPLIT_REGEX
        and split.get("behavior") == "Isolated"
        and not split.get("invert", False)
        and byte_level.get("type") == "ByteLevel"
        and byte_level.get("use_regex") is False
        and not byte_level.get("add_prefix_space", False)
    )


def _with_our_pretokenizer(model_class, model_dir: Path):
    """The converter's class for this architecture, with one decision overridden (see the module doc)."""

    def get_vocab_base_pre(self, tokenizer) -> str:
        try:
            return model_class.get_vocab_base_pre(self, tokenizer)
        except NotImplementedError:
            if uses_qwen2_pretokenizer(model_dir):
                log.info(
                    "%s: tokenizer unknown to llama.cpp by hash, but its pre-tokenizer is Qwen2's: writing 'qwen2'",
                    model_dir,
                )
                return "qwen2"
            raise LayerFailure(
                "rollout",
                f"llama.cpp's converter does not know the tokenizer of {model_dir}: its BPE pre-tokenizer is neither "
                "one llama.cpp has a hash for nor Qwen2's split regex + byte-level",
                "use a model llama.cpp supports, or train the tokenizer with Qwen2's pre-tokenizer (as grpolab's tiny "
                "model does)",
            ) from None

    def _create_vocab_sentencepiece(self):
        # The converter tries SentencePiece first and imports it before looking for tokenizer.model; a BPE
        # model has none, and the converter falls back to its BPE path on this very error. Saves a dependency.
        if not (Path(self.dir_model) / "tokenizer.model").is_file():
            raise FileNotFoundError(f"File not found: {Path(self.dir_model) / 'tokenizer.model'}")
        return model_class._create_vocab_sentencepiece(self)

    # The converter insists that every subclass names its architecture (__init_subclass__).
    namespace = {
        "model_arch": model_class.model_arch,
        "get_vocab_base_pre": get_vocab_base_pre,
        "_create_vocab_sentencepiece": _create_vocab_sentencepiece,
    }
    return type(model_class.__name__, (model_class,), namespace)


# --- Export ----------------------------------------------------------------------------------------


def convert_model_dir(model_dir: Path, out_path: Path, outtype: str = "f32", progress=print) -> Path:
    """Run llama.cpp's HF->GGUF conversion on a saved model folder (config, safetensors, tokenizer)."""
    model_dir, out_path = Path(model_dir), Path(out_path)
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r}: choose one of {', '.join(OUTTYPES)}")
    if not (model_dir / "config.json").is_file():
        raise LayerFailure(
            "rollout",
            f"cannot convert {model_dir} to GGUF: it has no config.json",
            "pass a saved Hugging Face model folder",
        )
    import torch

    converter = converter_dir(progress=progress)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    partial = out_path.with_name(out_path.name + ".partial")
    # The converter logs every tensor, and a banner when it does not know a tokenizer's hash (which we then
    # decide ourselves, see _with_our_pretokenizer); its errors still show.
    quiet = logging.getLogger("hf-to-gguf")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the converter's fixed test text is longer than a small model's context: harmless
    try:
        with _converter_on_path(converter) as (conversion, gguf_module), torch.inference_mode():
            ftype = {
                "f32": gguf_module.LlamaFileType.ALL_F32,
                "f16": gguf_module.LlamaFileType.MOSTLY_F16,
                "bf16": gguf_module.LlamaFileType.MOSTLY_BF16,
            }[outtype]
            hparams = conversion.ModelBase.load_hparams(model_dir, False)
            architecture = conversion.get_model_architecture(hparams, conversion.ModelType.TEXT)
            try:
                model_class = conversion.get_model_class(architecture, mmproj=False)
            except NotImplementedError:
                raise LayerFailure(
                    "rollout",
                    f"llama.cpp's converter does not support architecture {architecture}",
                    "use a model llama.cpp supports (Qwen3 does)",
                ) from None
            writer = _with_our_pretokenizer(model_class, model_dir)(
                model_dir, ftype, partial, model_name=model_dir.name
            )
            write_tensors = writer.gguf_writer.write_tensors_to_file
            writer.gguf_writer.write_tensors_to_file = lambda **_: write_tensors(
                progress=False
            )  # no progress bar per refresh
            writer.write()
    except BaseException:
        partial.unlink(missing_ok=True)  # never leave half a file behind
        raise
    finally:
        quiet.setLevel(level)
        hf_logging.set_verbosity(hf_level)
    partial.replace(out_path)
    return out_path


def save_merged(model, out_dir: Path, tokenizer=None) -> Path:
    """Save an in-memory model as a plain HF folder; a PEFT model is merged into a copy first."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = getattr(model, "module", model)  # unwrap DistributedDataParallel and friends
    if hasattr(model, "merge_and_unload"):  # a PeftModel: merge a copy, leave the trained one untouched
        merged = copy.deepcopy(model).merge_and_unload()
    else:
        merged = model
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" at every refresh says nothing
    try:
        merged.save_pretrained(out_dir, safe_serialization=True)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if tokenizer is None:
        from transformers import AutoTokenizer

        source = getattr(getattr(merged, "config", None), "name_or_path", "") or ""
        if not source:
            raise ValueError("export_gguf: pass the tokenizer; the model does not say where it was loaded from")
        tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def export_gguf(model_dir_or_model, out_path, outtype: str = "f32", tokenizer=None, progress=print) -> Path:
    """Convert the policy to a GGUF file and return its path.

    `model_dir_or_model`: a saved HF model folder (e.g. the tiny model), or an in-memory model; a PEFT
    model (base + LoRA adapter) is merged into a copy first. `tokenizer` is needed only for in-memory
    models whose `name_or_path` does not point at their tokenizer. Writes `<out>.partial`, then renames,
    so a reader never sees half a file.
    """
    out_path = Path(out_path)
    if isinstance(model_dir_or_model, (str, os.PathLike)):
        return convert_model_dir(Path(model_dir_or_model), out_path, outtype, progress)
    with tempfile.TemporaryDirectory(
        prefix="grpolab-merged-", dir=out_path.parent if out_path.parent.exists() else None
    ) as tmp:
        save_merged(model_dir_or_model, Path(tmp), tokenizer)
        return convert_model_dir(Path(tmp), out_path, outtype, progress)


def check_gguf(path) -> Path:
    """Fail with a sentence when `path` is missing or not a GGUF file (before llama.cpp gets to it)."""
    path = Path(path)
    if not path.is_file():
        raise LayerFailure(
            "rollout",
            f"GGUF file {path} does not exist",
            "export the policy first: `python -m grpolab.model.gguf export MODEL_DIR OUT.gguf`",
        )
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] != GGUF_MAGIC or len(head) < 8:
        raise LayerFailure(
            "rollout",
            f"{path} is not a GGUF file (it starts with {head[:4]!r}, not b'GGUF'): corrupt or a different format",
            "delete it and export the policy again",
        )
    return path


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m grpolab.model.gguf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="convert a saved HF model folder to GGUF")
    export.add_argument("model_dir")
    export.add_argument("out_path")
    export.add_argument("--outtype", choices=OUTTYPES, default="f32")
    fetch = sub.add_parser(
        "converter", help="make sure llama.cpp's converter is here (fetch the sdist from PyPI if needed)"
    )
    fetch.add_argument(
        "--into", help="copy it to this folder too (what the images do; then set GRPOLAB_LLAMACPP_CONVERTER to it)"
    )
    args = parser.parse_args(argv)
    if args.command == "export":
        started = time.perf_counter()
        path = export_gguf(args.model_dir, args.out_path, args.outtype)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s")
    else:
        path = converter_dir()
        if args.into:
            shutil.copytree(path, args.into, dirs_exist_ok=True)
            path = Path(args.into)
        print(path)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LayerFailure as failure:
        print(failure, file=sys.stderr)
        sys.exit(failure.exit_status)
