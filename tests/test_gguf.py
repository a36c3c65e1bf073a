"""GGUF files and the converter's source (no llama.cpp needed)."""

import hashlib
import json

import pytest
from grpolab.common.errors import LayerFailure

# --- GGUF files and the converter's source (no llama.cpp needed) -----------------------------------------


def test_check_gguf_refuses_missing_and_foreign_files(tmp_path):
    from grpolab.model.gguf import check_gguf

    with pytest.raises(LayerFailure, match="does not exist"):
        check_gguf(tmp_path / "absent.gguf")
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(LayerFailure, match="not a GGUF file"):
        check_gguf(tmp_path / "model.safetensors")
    (tmp_path / "ok.gguf").write_bytes(b"GGUF\x03\x00\x00\x00rest")
    assert check_gguf(tmp_path / "ok.gguf") == tmp_path / "ok.gguf"


def fake_sdist(path, with_converter=True):
    import io
    import tarfile

    members = {"llama_cpp_python-9.9.9/README.md": b"x", "llama_cpp_python-9.9.9/vendor/llama.cpp/src/llama.cpp": b"x"}
    if with_converter:
        members.update({
            "llama_cpp_python-9.9.9/vendor/llama.cpp/convert_hf_to_gguf.py": b"# converter",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/convert_lora_to_gguf.py": b"# lora",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/conversion/__init__.py": b"",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/conversion/qwen.py": b"",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/gguf-py/gguf/__init__.py": b"",
            "llama_cpp_python-9.9.9/vendor/llama.cpp/gguf-py/tests/test.py": b"",
        })
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_converter_is_taken_from_the_sdist_only(tmp_path, monkeypatch):
    from grpolab.model import gguf

    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(gguf.CONVERTER_ENV, raising=False)
    sdist = gguf.sdist_path("9.9.9")
    sdist.parent.mkdir(parents=True)
    fake_sdist(sdist)
    lock = tmp_path / "lock.txt"  # a cached sdist is used only when the track's lock lists its sha256
    lock.write_text(f"llama-cpp-python==9.9.9 \\\n    --hash=sha256:{hashlib.sha256(sdist.read_bytes()).hexdigest()}\n")
    monkeypatch.setenv(gguf.LOCK_FILE_ENV, str(lock))
    found = gguf.converter_dir("9.9.9", download=False, progress=lambda *_: None)
    assert found == tmp_path / "cache" / "llama.cpp-converter" / "9.9.9"
    files = sorted(str(p.relative_to(found)) for p in found.rglob("*") if p.is_file())
    assert files == [
        "conversion/__init__.py",
        "conversion/qwen.py",
        "convert_hf_to_gguf.py",
        "convert_lora_to_gguf.py",
        "gguf-py/gguf/__init__.py",
    ]
    assert gguf.converter_dir("9.9.9", download=False) == found  # extracted once, then reused


def test_converter_missing_without_download_says_what_to_do(tmp_path, monkeypatch):
    from grpolab.model import gguf

    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(gguf.CONVERTER_ENV, raising=False)
    with pytest.raises(LayerFailure, match="converter is not here") as error:
        gguf.converter_dir("9.9.9", download=False)
    assert "python -m grpolab.model.gguf converter" in error.value.action
    monkeypatch.setenv(gguf.CONVERTER_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(LayerFailure, match="does not hold convert_hf_to_gguf.py"):
        gguf.converter_dir()


def test_sdist_without_converter_or_with_wrong_digest_is_refused(tmp_path, monkeypatch):
    from grpolab.model import gguf

    with pytest.raises(LayerFailure, match="does not carry"):
        gguf.extract_converter(fake_sdist(tmp_path / "no.tar.gz", with_converter=False), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    lock = tmp_path / "lock.txt"
    lock.write_text("llama-cpp-python==9.9.9 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    monkeypatch.setenv(gguf.LOCK_FILE_ENV, str(lock))
    monkeypatch.delenv(gguf.SDIST_DIR_ENV, raising=False)
    with pytest.raises(LayerFailure, match="sha256"):
        gguf.verify_sdist(fake_sdist(tmp_path / "bad.tar.gz"), "9.9.9")


def test_qwen2_pretokenizer_detection(tmp_path):
    from grpolab.model.gguf import QWEN2_SPLIT_REGEX, uses_qwen2_pretokenizer

    def write(pre):
        (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}, "pre_tokenizer": pre}))
        return uses_qwen2_pretokenizer(tmp_path)

    qwen2 = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    assert write(qwen2)
    other_regex = json.loads(json.dumps(qwen2))
    other_regex["pretokenizers"][0]["pattern"]["Regex"] = r"\p{N}{1,3}"
    assert not write(other_regex)
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    assert not write(gpt2)
