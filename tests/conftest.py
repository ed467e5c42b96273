"""Fixtures shared by every test directory (unit and integration)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(name="standin_model_dir", scope="session")
def fixture_standin_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory for ``--model-path`` of the SGLang stand-in (tests/standin).

    Like SGLang, the stand-in refuses to start unless the model path is a directory
    holding config.json; it reads nothing else there, so config.json is all this holds.
    """
    model_dir = tmp_path_factory.mktemp("models") / "glm"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(
        json.dumps({"architectures": ["StandinForCausalLM"], "model_type": "standin"}, indent=2), encoding="utf-8")
    return model_dir
