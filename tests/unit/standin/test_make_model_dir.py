"""The stand-in's model directory (tests/standin/model/make_model_dir.py).

Real tokenizer and config files, small real safetensors shards with their index, and a
manifest beside the directory; the same bytes on every run, and nothing written twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file
from tokenizers import Tokenizer

SCRIPT = Path(__file__).resolve().parents[2] / "standin" / "model" / "make_model_dir.py"
SHARDS = [f"model-{n:05d}-of-00003.safetensors" for n in (1, 2, 3)]
INDEX = "model.safetensors.index.json"
MIB = 1024 * 1024
MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  ([0-9]+)  (\S+)$")


def make(target: Path | str) -> list[str]:
    """Run the script (a fresh process each time) on target; return the paths it reported as written."""
    result = subprocess.run([sys.executable, str(SCRIPT), str(target)], capture_output=True, text=True, timeout=120, check=True)
    lines = result.stdout.splitlines()
    assert all(line.startswith("wrote ") for line in lines), result.stdout
    return [line[len("wrote "):] for line in lines]


def manifest_of(target: Path) -> Path:
    return Path(str(target) + ".manifest")


def contents(target: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(target.iterdir())} | {".manifest": manifest_of(target).read_bytes()}


@pytest.fixture(name="model_dir", scope="module")
def fixture_model_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A model directory made once, and what the first run reported."""
    target = tmp_path_factory.mktemp("models") / "glm"
    return target, make(target)


def test_the_first_run_writes_every_file_and_the_manifest(model_dir: tuple[Path, list[str]]) -> None:
    target, written = model_dir
    names = ["config.json", *SHARDS, INDEX, "tokenizer.json", "tokenizer_config.json"]
    assert sorted(p.name for p in target.iterdir()) == names
    assert sorted(written) == sorted([str(target / n) for n in names] + [str(manifest_of(target))])


def test_the_shards_load_back_with_safetensors(model_dir: tuple[Path, list[str]]) -> None:
    target, _written = model_dir
    seen: set[str] = set()
    for shard in SHARDS:
        path = target / shard
        assert 3 * MIB <= path.stat().st_size <= 6 * MIB, (shard, path.stat().st_size)
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        tensors = load_file(str(path))
        assert len(tensors) >= 3
        assert all(a.dtype == np.float16 and np.isfinite(a).all() for a in tensors.values())
        assert not seen & tensors.keys()
        seen |= tensors.keys()
        with safe_open(str(path), framework="numpy") as handle:
            assert handle.metadata() == {"format": "pt"}
    assert {"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.2.self_attn.q_proj.weight",
            "lm_head.weight"} <= seen
    up = load_file(str(target / SHARDS[0]))["model.layers.0.mlp.up_proj.weight"]
    assert up.ndim == 2 and 0 < float(np.abs(up).max()) <= 0.0201 and float(up.std()) > 0.001  # real values, not zeros


def test_the_index_names_every_tensor_and_their_total_size(model_dir: tuple[Path, list[str]]) -> None:
    target, _written = model_dir
    index = json.loads((target / INDEX).read_text(encoding="utf-8"))
    assert set(index) == {"metadata", "weight_map"}
    expected: dict[str, str] = {}
    total = 0
    for shard in SHARDS:
        tensors = load_file(str(target / shard))
        expected.update(dict.fromkeys(tensors, shard))
        total += sum(a.nbytes for a in tensors.values())
    assert index["weight_map"] == expected
    assert index["metadata"] == {"total_size": total}


def test_the_manifest_lists_every_file_with_its_sha256_and_size(model_dir: tuple[Path, list[str]]) -> None:
    target, _written = model_dir
    lines = manifest_of(target).read_text(encoding="utf-8").splitlines()
    rows = [MANIFEST_LINE.match(line) for line in lines]
    assert all(rows), lines
    names = [m.group(3) for m in rows if m]
    assert names == sorted(p.name for p in target.iterdir() if p.is_file())
    for match in rows:
        assert match is not None
        data = (target / match.group(3)).read_bytes()
        assert (match.group(1), int(match.group(2))) == (hashlib.sha256(data).hexdigest(), len(data))


def test_the_config_and_tokenizer_stay(model_dir: tuple[Path, list[str]]) -> None:
    target, _written = model_dir
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "standin" and "safetensors" in config["note"]
    tokenizer = Tokenizer.from_file(str(target / "tokenizer.json"))
    assert tokenizer.decode(tokenizer.encode("hello world").ids) == "hello world"


def test_a_second_run_writes_nothing(model_dir: tuple[Path, list[str]]) -> None:
    target, _written = model_dir
    before = contents(target)
    assert make(target) == []
    assert contents(target) == before


def test_the_bytes_are_the_same_in_another_directory(model_dir: tuple[Path, list[str]], tmp_path: Path) -> None:
    target, _written = model_dir
    other = tmp_path / "elsewhere" / "glm"
    make(other)
    assert contents(other) == contents(target)


def test_only_a_file_that_differs_is_written_again(tmp_path: Path) -> None:
    target = tmp_path / "glm"
    make(target)
    good = contents(target)
    shard, index, manifest = target / SHARDS[1], target / INDEX, manifest_of(target)
    shard.write_bytes(shard.read_bytes()[:-2] + b"\0\0")
    index.write_text("{}", encoding="utf-8")
    assert make(target) == [str(shard), str(index)]  # restored: the manifest already lists these bytes
    manifest.write_text("", encoding="utf-8")
    assert make(target) == [str(manifest)]
    assert contents(target) == good
    assert not [p for p in target.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_trailing_slash_names_the_same_manifest(tmp_path: Path) -> None:
    target = tmp_path / "glm"
    written = make(str(target) + os.sep)
    assert str(manifest_of(target)) in written
    assert not (target / ".manifest").exists()
