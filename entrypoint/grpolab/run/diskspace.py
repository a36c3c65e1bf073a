"""Disk space for what a run writes under runs/: the lab's writes estimated and checked against the free space
before training, room for the run-log line reserved while a run is under way, and a full disk met while saving
(ENOSPC, or EDQUOT: a quota) turned into the run-log layer's verdict, with the trained adapter saved elsewhere
rather than lost.

What a lab writes: the adapter (its weights in float32, PEFT's default, plus its config and model card), the reward
plot, the run-log lines, and, on the llamacpp path, the GGUF copies of the model while it trains. The adapter is
counted from the model; the other allowances below sit above what a default track c lab run was measured to write
(docs/faults.md, "Faults of files and machines", gives the measurement and how it was taken), except TensorBoard's, a
prediction (TensorBoard is in no lock this machine runs).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import tempfile
from pathlib import Path

from ..common.errors import LayerFailure
from ..common.paths import cache_dir
from ..common.rollout_paths import rollout_path

DISK_FULL_ERRNOS = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded"}
# The same errors as the Rust of safetensors words them (its save_file raises SafetensorError, not OSError).
DISK_FULL_WORDS = tuple(DISK_FULL_ERRNOS.values()) + tuple(f"os error {number}" for number in DISK_FULL_ERRNOS)

ADAPTER_BYTES_PER_PARAMETER = 4  # PEFT keeps and saves LoRA weights in float32 unless told otherwise
ADAPTER_HEADER_BYTES_PER_TENSOR = 160  # safetensors' JSON entry of one LoRA matrix (its name, dtype, shape, offsets)
ADAPTER_FILES_BYTES = 8 << 10  # adapter_config.json and PEFT's model card (docs/faults.md)
PLOT_BYTES = 128 << 10  # reward.png
LINE_BASE_BYTES = 16 << 10  # a run-log line without its steps: settings, fingerprint, model identity, memory
LINE_BYTES_PER_LOGGED_STEP = 400  # one entry of the line's "steps"
TENSORBOARD_BYTES_PER_LOGGED_STEP = 4 << 10  # predicted (tensorboard is in no track c lock): ~40 scalars of ~100 bytes
MARGIN_FRACTION, MARGIN_BYTES = 0.10, 1 << 20  # files round up to whole blocks, and other writers share the disk


def is_disk_full(error: BaseException | None) -> bool:
    """Whether `error`, or an error it was raised from, is a full disk or an exceeded quota."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if any(words in str(error) for words in DISK_FULL_WORDS):
            return True
        error = error.__cause__ or error.__context__
    return False


def existing_folder(folder: Path) -> Path:
    """`folder`, or the nearest folder above it that exists (where a folder not yet made will live)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def free_bytes(folder: Path) -> int:
    """Bytes this user may still write on the filesystem of `folder` (statvfs's f_bavail; a quota is not seen here)."""
    return shutil.disk_usage(existing_folder(folder)).free


def size_text(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def exact_size_text(count: int) -> str:
    return size_text(count) + (f" ({count:,} bytes)" if count >= 1 << 10 else "")


def lora_matrices(model, target_modules: str) -> list[tuple[int, int]]:
    """(in_features, out_features) of every linear layer the adapter will wrap, as PEFT matches them: a module whose
    name is a target or ends with "." + a target; all-linear takes every linear layer but the output layer."""
    targets = None if target_modules == "all-linear" else [t.strip() for t in target_modules.split(",") if t.strip()]
    output_layer = (
        getattr(model.get_output_embeddings(), "weight", None) if hasattr(model, "get_output_embeddings") else None
    )
    matrices = []
    for name, module in model.named_modules():
        if not (hasattr(module, "in_features") and hasattr(module, "out_features")):
            continue
        if targets is None and (
            name.rsplit(".", 1)[-1] == "lm_head" or getattr(module, "weight", None) is output_layer is not None
        ):
            continue
        if targets is not None and not any(name == t or name.endswith("." + t) for t in targets):
            continue
        matrices.append((int(module.in_features), int(module.out_features)))
    return matrices


def run_log_line_bytes(settings) -> int:
    """A room for the run's full run-log line: more than the line takes (its steps are the part that grows)."""
    logged_steps = settings.max_steps // max(1, settings.logging_steps) + 1
    return LINE_BASE_BYTES + logged_steps * LINE_BYTES_PER_LOGGED_STEP


def lab_writes(settings, model) -> dict[str, int]:
    """Bytes the lab will write under runs/, by what writes them: the adapter, the plot, the run-log lines, and the
    --report-to logs and llama.cpp's GGUF copies (temporary, but at their peak while training) where the run has
    them."""
    matrices = lora_matrices(model, settings.lora_target_modules)
    parameters = sum(settings.lora_rank * (fan_in + fan_out) for fan_in, fan_out in matrices)
    parts = {
        "adapter": parameters * ADAPTER_BYTES_PER_PARAMETER
        + 2 * len(matrices) * ADAPTER_HEADER_BYTES_PER_TENSOR
        + ADAPTER_FILES_BYTES,
        "plot": PLOT_BYTES,
        "run-log lines": run_log_line_bytes(settings) + LINE_BASE_BYTES,  # the start record, then the full line
    }
    logged_steps = settings.max_steps // max(1, settings.logging_steps) + 1
    if settings.report_to == "tensorboard":
        parts["tensorboard logs"] = logged_steps * TENSORBOARD_BYTES_PER_LOGGED_STEP
    parts.update(rollout_path(settings.rollout).disk_writes(settings, model))  # the path's own: llama.cpp's GGUF copies
    return parts


def margin(total: int) -> int:
    return int(total * MARGIN_FRACTION) + MARGIN_BYTES


def check_free_space(folder: Path, parts: dict[str, int]) -> tuple[str, dict]:
    """(the line to print, the run log's "disk" field) when the filesystem of `folder` has room for `parts` plus the
    margin; the run-log layer's refusal, with the numbers, when it has not."""
    total = sum(parts.values())
    free = free_bytes(folder)
    listed = ", ".join(f"{what} {size_text(size)}" for what, size in parts.items())
    if free < total + margin(total):
        where = (
            ""
            if existing_folder(folder) == Path(folder).absolute()
            else f" (on the filesystem of {existing_folder(folder)})"
        )
        raise LayerFailure(
            "runlog",
            f"{folder} has {exact_size_text(free)} free{where}, but this run writes about {size_text(total)} there "
            f"({listed}); with a "
            f"margin of {size_text(margin(total))} it needs {exact_size_text(total + margin(total))}. Nothing was "
            "trained",
            f"free space on that filesystem (`df -h {existing_folder(folder)}` shows it), or point GRPOLAB_RUNS_DIR at "
            "a folder with room",
        )
    return (f"{folder}: {size_text(free)} free; this run writes about {size_text(total)} ({listed})",
            {"estimated_bytes": total, "estimate": parts, "free_bytes_before": free})


# --- room for the run-log line ------------------------------------------------------------------------------

RESERVATION_PREFIX = ".runlog-room"


class LineRoom:
    """Room for a run's last run-log line, held on the run log's filesystem from the start of the run: a file of
    `size` bytes allocated in the run log's folder, deleted just before the line is written, so that a disk filled
    while the run trained still takes the line whole. A run killed where nothing could be caught leaves its file;
    the next run on this host deletes it (its process is gone)."""

    def __init__(self, log_path: Path, run_id: str, size: int):
        self.folder = Path(log_path).parent
        self.path = self.folder / f"{RESERVATION_PREFIX}.{socket.gethostname()}.{os.getpid()}.{run_id}"
        self.size = size

    def hold(self) -> LineRoom:
        """Allocate the room (OSError when the filesystem has less than `size` free: the run-log layer's refusal)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_rooms_of_dead_runs(self.folder)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, self.size)
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.write(fd, b"\0" * self.size)  # a filesystem without fallocate: written blocks are held as well
        except OSError:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return self

    def release(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:  # its folder is gone or was never one: nothing is held
            pass


def remove_rooms_of_dead_runs(folder: Path) -> None:
    """Delete the rooms of runs on this host whose process is gone (killed with SIGKILL, the OOM killer)."""
    host = socket.gethostname()
    for path in folder.glob(f"{RESERVATION_PREFIX}.{host}.*"):
        pid = path.name.removeprefix(f"{RESERVATION_PREFIX}.{host}.").split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            path.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


# --- a full disk while saving -------------------------------------------------------------------------------


def rescue_folders(run_id: str) -> list[Path]:
    """Where a run's outputs go when runs/ is full: the lab's cache (its own volume in the images), then the system's
    temporary folder."""
    return [cache_dir() / "rescued" / run_id, Path(tempfile.gettempdir()) / f"grpolab-rescued-{run_id}"]


def save_elsewhere(run_id: str, save, needed: int) -> tuple[Path | None, list[str]]:
    """Call save(folder) for the first rescue folder with room for `needed` bytes that takes it whole. Returns (that
    folder, or None, and why each folder tried did not take it)."""
    tried = []
    for folder in rescue_folders(run_id):
        try:
            free = free_bytes(folder)
            if free < needed + margin(needed):
                tried.append(f"{folder}: {size_text(free)} free")
                continue
            folder.mkdir(parents=True, exist_ok=True)
            save(folder)
            return folder, tried
        except Exception as error:  # noqa: BLE001 - any failure there: try the next place, say why
            shutil.rmtree(folder, ignore_errors=True)
            tried.append(f"{folder}: {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}")
    return None, tried


def disk_full_failure(folder: Path, error: BaseException, needed: int | None, free: int, kept: str) -> LayerFailure:
    """The run-log layer's verdict on a full disk met while writing into `folder`: the folder, the bytes needed and
    free, and what became of the outputs (`kept`, one sentence)."""
    reason = next(
        (
            words
            for number, words in DISK_FULL_ERRNOS.items()
            if f"os error {number}" in str(error) or words in str(error) or getattr(error, "errno", None) == number
        ),
        "No space left on device",
    )
    need = f"it needed about {exact_size_text(needed)} there and " if needed else ""
    failure = LayerFailure(
        "runlog",
        f"the disk of {folder} is full ({reason}): {need}{exact_size_text(free)} was free. {kept}",
        f"free space on that filesystem (`df -h {existing_folder(folder)}` shows it; a quota: `quota -s`), or point "
        "GRPOLAB_RUNS_DIR "
        "at a folder with room, then run again",
    )
    failure.__cause__ = error
    return failure
