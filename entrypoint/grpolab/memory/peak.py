"""Peak memory of one run, measured on the basis the estimate predicts, with every part logged.

    with PeakMemoryMeter(device_type, unified_memory=track.unified_memory) as meter:   # before the model loads
        ...load, generate, train...
    record.update(meter.fields())

What "peak memory" means on each kind of device (`peak_memory_gb_measured` is always the part the estimate
models: the peak above the runtime baseline taken when the meter starts):
  cpu      the process's resident-set high-water mark (VmHWM, reset at the start through /proc/self/clear_refs,
           else the largest sampled VmRSS) minus the resident set after imports and before the model loads
           (the runtime baseline: Python, torch, transformers, PEFT, TRL).
  cuda     torch.cuda.max_memory_allocated (reset at the start) minus what was allocated at the start; also logged:
           max_memory_reserved (the caching allocator's pool) and the device-wide use from cudaMemGetInfo (sampled),
           which also sees pools outside torch's allocator, such as a colocated vLLM's; ROCm reports through the same
           calls.
  mps      torch.mps.driver_allocated_memory, sampled (MPS keeps no peak), minus its value at the start.
Unified memory (tracks whose accelerator shares the host's RAM) also logs the low-water mark of the host's
MemAvailable during the run, sampled: that, not the allocator's view, is what wedges such a machine.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import sys
import threading
from pathlib import Path

from ..environment.machine import meminfo_bytes

GB = 1e9
# Imported before the baseline is taken, so that their code and globals count as runtime, not as the run.
RUNTIME_MODULES = ("torch", "transformers", "peft", "trl", "datasets")
SAMPLE_EVERY_S = 0.02


def _proc_status_kib(field: str) -> int | None:
    """A `VmRSS`-style field of /proc/self/status in KiB (None off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def resident_set_gb() -> float | None:
    kib = _proc_status_kib("VmRSS")
    return None if kib is None else kib * 1024 / GB


def resident_high_water_gb() -> float | None:
    kib = _proc_status_kib("VmHWM")
    return None if kib is None else kib * 1024 / GB


def reset_resident_high_water() -> bool:
    """Reset VmHWM to the current resident set (Linux: write 5 to /proc/self/clear_refs). False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    hwm, rss = _proc_status_kib("VmHWM"), _proc_status_kib("VmRSS")
    return hwm is not None and rss is not None and hwm <= rss + 1024  # within a MiB: the reset took


def host_available_gb() -> float | None:
    available = meminfo_bytes().get("MemAvailable")
    return None if available is None else available / GB


def release_freed_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS, so an earlier run in this process (the
    smoke test before the lab) does not hide in the baseline or get reused unseen."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc (macOS, musl): nothing to trim


def warm_up_runtime(torch, device_type: str) -> None:
    """One small forward, backward and Adam step on the device, so that the compute libraries' code, thread
    pools and workspaces (oneDNN/MKL on the CPU, cuBLAS handles on a GPU) load before the baseline is taken:
    they are the runtime's, whatever the model, and no term of the estimate models them."""
    layer = torch.nn.Linear(64, 64).to(device_type)
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.randn(8, 64, device=device_type)).softmax(-1).sum().backward()
    optimizer.step()
    if device_type == "cuda":
        torch.cuda.synchronize()


class PeakMemoryMeter:
    """Measures one run's peak memory; start it after the imports and before the model loads."""

    def __init__(
        self,
        device_type: str,
        unified_memory: bool = False,
        preload=RUNTIME_MODULES,
        sample_every_s: float = SAMPLE_EVERY_S,
    ):
        self.device_type = device_type
        self.unified_memory = unified_memory
        self.preload = preload
        self.sample_every_s = sample_every_s
        self.parts: dict[str, float] = {}
        self.sources: dict[str, str] = {}
        self._max: dict[str, float] = {}
        self._min: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = True  # until started
        self.baseline_gb = 0.0
        self.hwm_reset = False
        self._since_mark = 0.0  # the primary sampled value's largest since the last mark (cpu: VmRSS, mps: driver)
        self._overall_gb = 0.0  # the primary peak over the phases already closed by mark()
        self._reserved_gb = 0.0

    # --- start and stop --------------------------------------------------------------------------------

    def __enter__(self) -> "PeakMemoryMeter":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "PeakMemoryMeter":
        self._stopped = False
        for name in self.preload:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module this environment lacks is simply not runtime here
                pass
        self._torch = sys.modules.get("torch")
        if self.device_type == "cpu":
            # The allocator is left as the C library set it: the resident set measured is the one the run has
            # without a meter (and the one the out-of-memory killer counts); the estimate's allocator term
            # predicts what glibc keeps resident beyond the live tensors.
            self.sources["allocator"] = "the C library's own settings, untouched by the meter"
        if self._torch is not None:
            warm_up_runtime(self._torch, self.device_type)
        release_freed_memory()
        if self.device_type == "cuda":
            self._torch.cuda.synchronize()
            self._torch.cuda.reset_peak_memory_stats()
            self.baseline_gb = self._torch.cuda.memory_allocated() / GB
            self.sources["baseline"] = "torch.cuda.memory_allocated at the start"
        elif self.device_type == "mps":
            self.baseline_gb = self._torch.mps.driver_allocated_memory() / GB
            self.sources["baseline"] = "torch.mps.driver_allocated_memory at the start"
        else:
            self.hwm_reset = reset_resident_high_water()
            self.baseline_gb = resident_set_gb() or 0.0
            self.sources["baseline"] = "resident set (VmRSS) after imports, before the model loads"
        self._sample()
        if self.needs_sampling:
            self._thread = threading.Thread(target=self._sample_until_stopped, name="peak-memory-meter", daemon=True)
            self._thread.start()
        self.sources["sampling"] = (f"a thread every {self.sample_every_s:g} s" if self.needs_sampling
                                    else "none: the kernel keeps the resident high-water mark")
        return self

    @property
    def needs_sampling(self) -> bool:
        """Whether anything the meter logs is only known by sampling. On the CPU the kernel keeps the peak
        (VmHWM) for free, so no thread runs beside the trainer unless the high-water mark cannot be reset or
        the host's MemAvailable must be followed (unified memory). GPUs: the device-wide use and MPS's driver
        allocation have no high-water mark."""
        return self.device_type != "cpu" or not self.hwm_reset or self.unified_memory

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._sample()
        self._read_peaks()

    # --- sampling --------------------------------------------------------------------------------------

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.sample_every_s):
            self._sample()

    def _keep(self, name: str, value: float | None, low: bool = False) -> None:
        if value is None:
            return
        table, better = (self._min, min) if low else (self._max, max)
        table[name] = better(table.get(name, value), value)

    def _sample(self) -> None:
        rss = resident_set_gb()
        self._keep("resident_set_gb", rss)
        if self.device_type == "cpu" and rss is not None:
            self._since_mark = max(self._since_mark, rss)
        if self.unified_memory:
            self._keep("host_available_gb", host_available_gb(), low=True)
        try:
            if self.device_type == "cuda":
                free, total = self._torch.cuda.mem_get_info()
                self._keep("device_used_gb", (total - free) / GB)
            elif self.device_type == "mps":
                driver = self._torch.mps.driver_allocated_memory() / GB
                self._keep("mps_driver_allocated_gb", driver)
                self._since_mark = max(self._since_mark, driver)
        except Exception:  # noqa: BLE001 - a failed sample is a missing point, not a failed run
            pass

    def _primary_peak_gb(self) -> float:
        """This device kind's peak since the last mark (or the start), baseline included."""
        if self.device_type == "cuda":
            self._reserved_gb = max(self._reserved_gb, self._torch.cuda.max_memory_reserved() / GB)
            return self._torch.cuda.max_memory_allocated() / GB
        hwm = resident_high_water_gb() if self.device_type == "cpu" and self.hwm_reset else None
        return max(hwm or 0.0, self._since_mark, self.baseline_gb)

    def mark(self, phase: str) -> None:
        """Close a phase of the run (e.g. "rollout", "update"): log its own peak above the baseline as
        peak_PHASE_gb (the largest over repeats) and measure the next phase from here."""
        self._sample()
        peak = self._primary_peak_gb()
        self._overall_gb = max(self._overall_gb, peak)
        key = f"peak_{phase}_gb"
        self.parts[key] = max(self.parts.get(key, 0.0), peak - self.baseline_gb)
        self.sources[key] = f"the {phase} phase's own peak, above the baseline"
        if self.device_type == "cuda":
            self._torch.cuda.reset_peak_memory_stats()
        elif self.device_type == "cpu" and self.hwm_reset:
            self.hwm_reset = reset_resident_high_water()
        self._since_mark = 0.0

    def _read_peaks(self) -> None:
        parts, sources = self.parts, self.sources
        parts["runtime_baseline_gb"] = self.baseline_gb
        peak = max(self._overall_gb, self._primary_peak_gb())
        if self.device_type == "cuda":
            parts["max_memory_allocated_gb"] = peak
            parts["max_memory_reserved_gb"] = self._reserved_gb
            if "device_used_gb" in self._max:
                parts["device_used_peak_gb"] = self._max["device_used_gb"]
                sources["device_used_peak_gb"] = (
                    "total - free from torch.cuda.mem_get_info, sampled (every process, every pool)"
                )
            parts["peak_gb"] = parts["max_memory_allocated_gb"]
            sources["peak_gb"] = "torch.cuda.max_memory_allocated, reset at the start"
        elif self.device_type == "mps":
            parts["peak_gb"] = parts["mps_driver_allocated_peak_gb"] = peak
            sources["peak_gb"] = f"torch.mps.driver_allocated_memory, sampled every {self.sample_every_s:g} s"
        else:
            parts["peak_gb"] = peak
            sources["peak_gb"] = (
                "resident-set high-water mark (VmHWM, reset at the start)"
                if self.hwm_reset
                else f"largest resident set, sampled every {self.sample_every_s:g} s"
            )
        if self.device_type != "cpu" and "resident_set_gb" in self._max:
            parts["host_resident_set_peak_gb"] = self._max["resident_set_gb"]
        if "host_available_gb" in self._min:
            parts["host_available_low_gb"] = self._min["host_available_gb"]
            sources["host_available_low_gb"] = (
                "lowest MemAvailable of the host during the run, sampled (unified memory)"
            )

    def record_part(self, name: str, gb: float, source: str) -> None:
        """A part another layer reports, e.g. a colocated vLLM's key-value pool as vLLM states it."""
        self.parts[name] = gb
        self.sources[name] = source

    # --- the result ------------------------------------------------------------------------------------

    @property
    def peak_gb(self) -> float:
        """The part the estimate models: the peak above the runtime baseline."""
        return max(0.0, self.parts.get("peak_gb", self.baseline_gb) - self.baseline_gb)

    def fields(self, predicted_gb: float | None = None) -> dict:
        """Run-log fields: the measured peak on the estimate's basis, its baseline, every part and its source."""
        out = {
            "peak_memory_gb_measured": round(self.peak_gb, 3),
            "peak_memory_basis": f"{self.device_type}: {self.sources.get('peak_gb', '?')}, minus the runtime baseline",
            "runtime_baseline_gb": round(self.baseline_gb, 3),
            "peak_memory_parts": {name: round(gb, 3) for name, gb in self.parts.items()},
            "peak_memory_sources": dict(self.sources),
        }
        if predicted_gb is not None:
            out["peak_memory_gb_predicted"] = round(predicted_gb, 3)
            out["peak_memory_ratio"] = round(predicted_gb / self.peak_gb, 3) if self.peak_gb > 0 else None
        return out



def peak_memory_line(record: dict) -> str:
    """Measured and predicted peak on the same basis (above the runtime baseline), with the baseline beside them."""
    measured, predicted = record["peak_memory_gb_measured"], record.get("peak_memory_gb_predicted")
    versus = (
        f"{predicted:.3f} GB predicted (ratio {record.get('peak_memory_ratio')})"
        if predicted is not None
        else "no prediction"
    )
    return (f"{measured:.3f} GB measured, {versus}, above a runtime baseline of {record['runtime_baseline_gb']:.2f} GB "
            f"({record['peak_memory_basis']})")
