"""The per-card rules the locked libraries themselves apply, read from their own Python source in the locked wheels
(never written from memory), for the kernels table's `library_rules`:

- vLLM's dtype check on CUDA (vllm/platforms/cuda.py, CudaPlatform.check_if_supports_dtype): the compute capability
  below which it refuses bfloat16 when the engine starts;
- vLLM's attention backend on CUDA: the priority list `_get_backend_priorities` returns for a causal, non-MLA model
  (per compute major where it differs), and each backend's `supports_compute_capability` and `supported_dtypes`
  (vllm/v1/attention/backends/*.py, classes named by registry.py's AttentionBackendEnum);
- torch's bfloat16 on CUDA (torch/cuda/__init__.py, is_bf16_supported): the compute major from which bfloat16 is
  native, and whether it is emulated below (`including_emulation`'s default), which is what transformers asks.

Each rule names the file, function and version it was read from. A rule the reader cannot place (the code changed
shape) is None, and the table says so: grpolab.common.card_verdict then says "unknown" rather than guessing.
Standard library only (ast), so the reader runs wherever `invoke kernels` does.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

VLLM_CUDA = "vllm/platforms/cuda.py"
VLLM_REGISTRY = "vllm/v1/attention/backends/registry.py"
VLLM_BACKEND_BASE = "vllm/v1/attention/backend.py"
TORCH_CUDA = "torch/cuda/__init__.py"
DTYPES = ("float32", "bfloat16", "float16")


def _source(wheel: zipfile.ZipFile, name: str) -> ast.Module | None:
    try:
        return ast.parse(wheel.read(name).decode())
    except KeyError:
        return None


def _function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _class(tree: ast.AST, name: str) -> ast.ClassDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


def _capability(node: ast.AST) -> tuple[int, int] | None:
    """DeviceCapability(8, 0) -> (8, 0); the integer 80 (has_device_capability(80)) -> (8, 0)."""
    if isinstance(node, ast.Call) and len(node.args) == 2 and all(isinstance(a, ast.Constant) for a in node.args):
        return node.args[0].value, node.args[1].value
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return divmod(node.value, 10)
    return None


def vllm_bfloat16_floor(tree: ast.Module) -> tuple[int, int] | None:
    """The capability below which check_if_supports_dtype raises for torch.bfloat16 (None: not found)."""
    check = _function(tree, "check_if_supports_dtype")
    if check is None:
        return None
    for node in ast.walk(check):
        if isinstance(node, ast.If) and "bfloat16" in ast.unparse(node.test):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("has_device_capability"):
                    return _capability(call.args[0]) if call.args else None
    return None


def _enum_names(node: ast.List) -> list[str]:
    """AttentionBackendEnum.X members of a list literal, leaving out the starred (conditional) ones."""
    return [e.attr for e in node.elts if isinstance(e, ast.Attribute)]


def vllm_priorities(tree: ast.Module) -> dict[str, list[str]] | None:
    """{"default": [...], "major 10": [...]}: _get_backend_priorities's list for a causal, non-MLA model."""
    function = _function(tree, "_get_backend_priorities")
    top = next((n for n in (function.body if function else []) if isinstance(n, ast.If)), None)
    if top is None or ast.unparse(top.test) != "use_mla":
        return None
    found: dict[str, list[str]] = {}
    for node in top.orelse:
        if not isinstance(node, ast.If):
            continue
        majors = [part for part in (node.test.values if isinstance(node.test, ast.BoolOp) else [node.test])
                  if isinstance(part, ast.Compare) and ast.unparse(part.left).endswith(".major")]
        listed = next((n.value for n in node.body if isinstance(n, ast.Return)), None)
        if majors and isinstance(listed, ast.List):
            found[f"major {majors[0].comparators[0].value}"] = _enum_names(listed)
        listed = next((n.value for n in node.orelse if isinstance(n, ast.Return)), None)
        if isinstance(listed, ast.List):
            found["default"] = _enum_names(listed)
    return found if "default" in found else None


def _evaluable(expr: ast.AST) -> dict | None:
    """A supports_compute_capability return expression as {"min": [8, 0], "max": [12, 1]} (bounds may be None),
    or None when it is more than comparisons of `capability` with DeviceCapability(...) joined by `and`."""
    if isinstance(expr, ast.Constant) and expr.value is True:
        return {"min": None, "max": None}
    parts = expr.values if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And) else [expr]
    bounds = {"min": None, "max": None}
    for part in parts:
        if not (isinstance(part, ast.Compare) and len(part.ops) == 1 and ast.unparse(part.left) == "capability"):
            return None
        value = _capability(part.comparators[0])
        if value is None or not isinstance(part.ops[0], (ast.GtE, ast.LtE)):
            return None
        bounds["min" if isinstance(part.ops[0], ast.GtE) else "max"] = list(value)
    return bounds


def _backend(wheel: zipfile.ZipFile, class_path: str, base_dtypes: list[str]) -> dict:
    module, _, name = class_path.rpartition(".")
    tree = _source(wheel, module.replace(".", "/") + ".py")
    cls = _class(tree, name) if tree else None
    if cls is None:
        return {"class": class_path, "capability": None, "dtypes": None}
    capability = {"min": None, "max": None}  # the base class's default: `return True`
    check = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "supports_compute_capability"),
                 None)
    if check is not None:
        returned = next((n.value for n in check.body if isinstance(n, ast.Return)), None)
        capability = _evaluable(returned) if returned is not None and len(check.body) <= 2 else None
    dtypes = base_dtypes
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "supported_dtypes" and node.value:
            dtypes = [e.attr for e in getattr(node.value, "elts", []) if isinstance(e, ast.Attribute)]
    return {"class": class_path, "capability": capability, "dtypes": dtypes}


def vllm_backends(wheel: zipfile.ZipFile, names: set[str]) -> dict[str, dict] | None:
    registry = _source(wheel, VLLM_REGISTRY)
    enum = _class(registry, "AttentionBackendEnum") if registry else None
    base = _source(wheel, VLLM_BACKEND_BASE)
    base_cls = _class(base, "AttentionBackend") if base else None
    if enum is None or base_cls is None:
        return None
    base_dtypes = next(
        ([e.attr for e in n.value.elts] for n in base_cls.body
         if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "supported_dtypes"), ["float16", "bfloat16"])
    paths = {}
    for node in enum.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names:
            value = node.value.elts[0] if isinstance(node.value, ast.Tuple) else node.value
            if isinstance(value, ast.Constant):
                paths[node.targets[0].id] = value.value
            elif isinstance(value, ast.JoinedStr | ast.BinOp):
                paths[node.targets[0].id] = None
    return {name: _backend(wheel, path, base_dtypes) if path else {"class": None, "capability": None, "dtypes": None}
            for name, path in sorted(paths.items())}


def torch_bfloat16(tree: ast.Module) -> dict | None:
    """is_bf16_supported: {"native_from_major": 8, "emulated_below": True} (None: not found)."""
    function = _function(tree, "is_bf16_supported")
    if function is None:
        return None
    native = next(
        (n.comparators[0].value for n in ast.walk(function)
         if isinstance(n, ast.Compare) and ast.unparse(n.left).endswith(".major") and isinstance(n.ops[0], ast.GtE)),
        None,
    )
    emulation = next((d for a, d in zip(function.args.args[::-1], function.args.defaults[::-1])
                      if a.arg == "including_emulation"), None)
    if native is None:
        return None
    return {"native_from_major": native,
            "emulated_below": bool(isinstance(emulation, ast.Constant) and emulation.value)}


def read_vllm(wheel_path: Path, version: str, distribution: str = "vllm") -> dict:
    """vLLM's dtype floor and attention choice, read from its wheel."""
    with zipfile.ZipFile(wheel_path) as wheel:
        tree = _source(wheel, VLLM_CUDA)
        floor = vllm_bfloat16_floor(tree) if tree else None
        priorities = vllm_priorities(tree) if tree else None
        names = {n for listed in (priorities or {}).values() for n in listed}
        backends = vllm_backends(wheel, names) if names else None
    return {
        "read_from": f"{distribution} {version}: {VLLM_CUDA} (CudaPlatform.check_if_supports_dtype, "
                     f"_get_backend_priorities), {VLLM_REGISTRY} and the backends' supports_compute_capability and "
                     "supported_dtypes",
        "bfloat16_min_capability": list(floor) if floor else None,
        "attention_priorities": priorities,
        "attention_backends": backends,
    }


def read_torch(wheel_path: Path, version: str) -> dict:
    with zipfile.ZipFile(wheel_path) as wheel:
        tree = _source(wheel, TORCH_CUDA)
    rule = torch_bfloat16(tree) if tree else None
    return {"read_from": f"torch {version}: {TORCH_CUDA} (is_bf16_supported)", "bfloat16": rule}


TRITON_COMPILER = "triton/backends/nvidia/compiler.py"
TRITON_BIN = "triton/backends/nvidia/bin/"


def _ptxas_facts(data: bytes) -> dict:
    """What one ptxas binary knows, from its own strings (any CPU architecture): its CUDA release and its GPU names."""
    release = re.search(rb"Cuda compilation tools, release (\d+\.\d+)", data)
    archs = sorted({m.decode() for m in re.findall(rb"(?<![\w.])sm_\d{2,3}[af]?(?![\w.])", data)},
                   key=lambda a: (int(re.sub(r"\D", "", a)), a))
    return {"cuda": release.group(1).decode() if release else None, "archs": archs}


def triton_ptxas_choice(tree: ast.Module) -> dict | None:
    """compiler.py's choice of ptxas and target name: {"blackwell_from": 100, "arch_specific_from": 90}, read from
    get_ptxas (`ptxas_blackwell if arch >= 100 else ptxas`) and sm_arch_from_capability (`"a" if capability >= 90`)."""
    found = {}
    for name, key in (("get_ptxas", "blackwell_from"), ("sm_arch_from_capability", "arch_specific_from")):
        function = _function(tree, name)
        compare = next((n.test for n in ast.walk(function) if isinstance(n, ast.IfExp)), None) if function else None
        if not (isinstance(compare, ast.Compare) and isinstance(compare.comparators[0], ast.Constant)):
            return None
        found[key] = compare.comparators[0].value
    return found


def read_triton(wheel_path: Path, version: str) -> dict:
    """Triton compiles its kernels' PTX with its own bundled ptxas (not the driver's JIT): which ptxas for which GPU,
    the target name it passes (sm_121a on GB10), and what each bundled ptxas knows."""
    with zipfile.ZipFile(wheel_path) as wheel:
        tree = _source(wheel, TRITON_COMPILER)
        tools = {
            name.rsplit("/", 1)[-1]: _ptxas_facts(wheel.read(name))
            for name in wheel.namelist()
            if name.startswith(TRITON_BIN) and name.rsplit("/", 1)[-1].startswith("ptxas")
        }
    return {
        "read_from": f"triton {version}: {TRITON_COMPILER} (get_ptxas, sm_arch_from_capability) and the strings of "
                     f"{TRITON_BIN}ptxas*",
        "choice": triton_ptxas_choice(tree) if tree else None,
        "ptxas": tools,
    }
