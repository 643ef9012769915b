"""A team's agents written as Hugging Face folders (saving.py), through the seed API's save_model: a file
or a linked agent folder refused before anything is written, and no staging folder left behind."""

from __future__ import annotations

import pytest

from comlrl_lightning.trainers.configs import MADPOConfig
from comlrl_lightning.trainers.preference import MADPOTrainer


def test_save_model_refuses_a_file_and_a_linked_agent_folder_and_leaves_no_staging(tmp_path):
    from comlrl_lightning.errors import ConfigurationError

    trainer = MADPOTrainer(agent_model="embedded", args=MADPOConfig(num_train_epochs=1))
    (tmp_path / "a_file").write_text("keep me")
    with pytest.raises(ConfigurationError, match=rf"save_model: {tmp_path}/a_file is a file"):
        trainer.save_model(str(tmp_path / "a_file"))
    assert (tmp_path / "a_file").read_text() == "keep me"
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    out.mkdir()
    (out / "agent_1").symlink_to(elsewhere)
    with pytest.raises(ConfigurationError, match=rf"save_model: {out}/agent_1 is a symbolic link"):
        trainer.save_model(str(out))
    assert (elsewhere / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in out.iterdir()) == ["agent_1"]  # nothing written, no staging folder
    (out / "agent_1").unlink()
    trainer.save_model(str(out))
    assert sorted(p.name for p in out.iterdir()) == ["agent_0", "agent_1"]
