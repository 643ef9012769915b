"""Hugging Face datasets as task items: configuration names, data files, saved folders, Dataset objects."""

from __future__ import annotations

import json
import re

import pytest

datasets = pytest.importorskip("datasets")

from comlrl_lightning import HFDataset, MADPOModule, PreferenceDataModule, TaskOptions  # noqa: E402
from comlrl_lightning.errors import DataError  # noqa: E402
from comlrl_lightning.runtime.distributed import shard  # noqa: E402
from comlrl_lightning.tasks.item_sources import DatasetItems, ItemSet  # noqa: E402
from comlrl_lightning.tasks.task import load_items  # noqa: E402
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_team, tiny_trainer  # noqa: E402
from tests.helpers.chat_helpers import TEMPLATE_A, TEMPLATE_B, tokenizer_with  # noqa: E402
from tests.helpers.cli_helpers import TINY_CLI  # noqa: E402

ROWS = [{"prompt": f"topic{i}", "id": i} for i in range(10)]


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------
# The item view


def test_a_dataset_is_served_as_a_view_that_indexes_slices_and_iterates_without_copying():
    items = load_items(datasets.Dataset.from_list(ROWS))
    assert isinstance(items, DatasetItems) and len(items) == 10
    assert items[3] == ROWS[3] and items[-1] == ROWS[-1]
    assert list(items) == ROWS
    odd = items[1::2]
    assert isinstance(odd, DatasetItems) and odd.dataset is items.dataset  # the same table, other rows
    assert list(odd) == ROWS[1::2] and odd[1] == ROWS[3] and list(odd[1:3]) == ROWS[3:7:2]
    items.chunk_size = 3  # iteration reads chunks; every row comes once, in order
    assert list(items[2:]) == ROWS[2:]


def test_shards_of_a_dataset_stay_views_and_of_a_list_stay_lists():
    items = load_items(datasets.Dataset.from_list(ROWS))
    shares = [shard(items, rank, 3) for rank in range(3)]
    assert all(isinstance(share, DatasetItems) for share in shares)
    assert [list(share) for share in shares] == [ROWS[rank::3] for rank in range(3)]
    assert shard(ROWS, 1, 3) == ROWS[1::3] and isinstance(shard(ROWS, 1, 3), list)


def test_a_dataset_in_another_format_gives_plain_python_items():
    items = load_items(datasets.Dataset.from_list(ROWS).with_format("numpy"))
    assert items[2] == ROWS[2] and type(items[2]["id"]) is int


def test_a_dataset_dict_gives_the_split_and_names_the_splits_it_has():
    both = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:6]), "test": datasets.Dataset.from_list(ROWS[6:])}
    )
    assert list(load_items(both, split="test", role="eval")) == ROWS[6:]
    with pytest.raises(
        ValueError, match=r"eval_dataset: the dataset has no split 'validation' \(it has: train, test\)"
    ):
        load_items(both, split="validation", role="eval")


def test_a_streaming_dataset_is_a_clear_error():
    streaming = datasets.Dataset.from_list(ROWS).to_iterable_dataset()
    with pytest.raises(ValueError, match="train_dataset: a streaming"):
        load_items(streaming)


# ---------------------------------------------------------------------------------------------
# Sources


def test_a_folder_written_by_save_to_disk_is_loaded_from_disk(tmp_path):
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    assert list(load_items(str(tmp_path / "saved"))) == ROWS
    assert list(load_items(tmp_path / "saved")) == ROWS  # a path object too
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:4]), "test": datasets.Dataset.from_list(ROWS[4:])}
    ).save_to_disk(str(tmp_path / "both"))
    assert list(load_items(str(tmp_path / "both"), split="test", role="eval")) == ROWS[4:]
    assert list(load_items(HFDataset(str(tmp_path / "both"), split="train"), split="test", role="eval")) == ROWS[:4]
    with pytest.raises(ValueError, match="was written by save_to_disk; it has no configurations"):
        load_items(HFDataset(str(tmp_path / "saved"), name="main"))


def test_data_files_of_a_packaged_builder(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS[:7])
    test = write_jsonl(tmp_path / "test.jsonl", ROWS[7:])
    # one file (or a list) is the split "train" whatever the data module's default split is
    assert list(load_items(HFDataset("json", data_files=train), split="test", role="eval")) == ROWS[:7]
    assert list(load_items(HFDataset("json", data_files=[train, test]))) == ROWS
    mapping = HFDataset("json", data_files={"train": train, "test": [test]})
    assert list(load_items(mapping, split="test", role="eval")) == ROWS[7:]
    csv = tmp_path / "items.csv"
    csv.write_text("prompt,id\n" + "".join(f"{r['prompt']},{r['id']}\n" for r in ROWS), encoding="utf-8")
    assert list(load_items(HFDataset("csv", data_files=str(csv)))) == ROWS


def test_a_local_dataset_folder_with_configuration_names(tmp_path):
    folder = tmp_path / "mathy"
    write_jsonl(folder / "main" / "train.jsonl", ROWS[:3])
    write_jsonl(folder / "main" / "test.jsonl", ROWS[3:5])
    write_jsonl(folder / "socratic" / "train.jsonl", ROWS[5:])
    (folder / "README.md").write_text(
        "---\nconfigs:\n"
        "- config_name: main\n  data_files:\n  - split: train\n    path: main/train.jsonl\n"
        "  - split: test\n    path: main/test.jsonl\n"
        "- config_name: socratic\n  data_files:\n  - split: train\n    path: socratic/train.jsonl\n---\n",
        encoding="utf-8",
    )
    assert list(load_items(HFDataset(str(folder), name="main"))) == ROWS[:3]
    assert list(load_items(HFDataset(str(folder), name="main"), split="test", role="eval")) == ROWS[3:5]
    assert list(load_items(HFDataset(str(folder), name="socratic"))) == ROWS[5:]
    with pytest.raises(ValueError, match=r"(?s)train_dataset: .*mathy: Config name is missing.*Name the configuration"):
        load_items(str(folder))
    with pytest.raises(ValueError, match=r"eval_dataset: .*mathy \(main\): Unknown split \"validation\""):
        load_items(HFDataset(str(folder), name="main"), split="validation", role="eval")


# ---------------------------------------------------------------------------------------------
# Runs


def test_a_chat_dataset_trains_from_its_table_without_a_list_copy(tmp_path):
    """A ``datasets.Dataset`` of chat ``messages`` (TRL's conversational form) trains a team whose
    two agents have different templates; the data module keeps the dataset, and sharding keeps views."""
    topics = ["sea", "moon", "tea", "rain", "sun", "ice", "oak", "elm"]
    table = datasets.Dataset.from_list([{"messages": [{"role": "user", "content": f"topic: {t}"}]} for t in topics])
    module = MADPOModule(
        **{**TINY_MODEL, "team": tiny_team(tokenizers=[tokenizer_with(TEMPLATE_A), tokenizer_with(TEMPLATE_B)])}
    )
    task = TaskOptions(
        train_dataset=table, eval_dataset=table, reward_func="comlrl_lightning.defaults.vowel_length_reward"
    )
    data = PreferenceDataModule(**{**TINY_DATA, "num_train_epochs": 1, "task": task})
    tiny_trainer(tmp_path, max_epochs=1).fit(module, data)
    assert (
        isinstance(data.train_items, DatasetItems) and data.train_items.dataset.data.table is table.data.table
    )  # the same Arrow table
    assert module.global_step > 0 and data.pairs
    assert {tuple(pair.prompts) for pair in data.pairs} <= {
        (f"user: topic: {t}\nassistant:", f"-- user says; topic: {t}\n-- reply;") for t in topics
    }


def test_the_seed_api_passes_a_dataset_through():
    from comlrl_lightning.trainers.preference import _items

    table = datasets.Dataset.from_list(ROWS)
    assert _items(table) is table
    spec = HFDataset("json", data_files="x.jsonl")
    assert _items(spec) is spec
    assert _items(iter(ROWS)) == ROWS


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_the_command_line_takes_a_dataset_with_data_files(tmp_path):
    from comlrl_lightning.cli import run_cli

    train = write_jsonl(tmp_path / "items" / "train.jsonl", ROWS[:8])
    source = json.dumps({"path": "json", "data_files": train})
    cli = run_cli(
        [
            "fit",
            "--model",
            "comlrl_lightning.MADPOModule",
            "--data",
            "comlrl_lightning.PreferenceDataModule",
            *TINY_CLI,
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.accelerator",
            "cpu",
            "--data.init_args.task.train_dataset",
            source,
            "--data.init_args.task",  # null in a nested option: as a mapping (jsonargparse reads --a.b.c null as "None")
            "{eval_dataset: null}",
            "--data.init_args.num_train_epochs",
            "1",
            "--data.init_args.task.reward_func",
            "comlrl_lightning.defaults.vowel_length_reward",
            "--trainer.logger",
            "false",
        ]
    )
    assert cli.datamodule.task_options.train_dataset == HFDataset("json", data_files=train)
    assert list(cli.datamodule.train_items) == ROWS[:8] and cli.trainer.global_step > 0


# ----------------------------------------------------------------------------------------------
# Datasets that are not what they claim: named by option, file and folder


def test_a_data_files_pattern_that_matches_nothing_is_named(tmp_path):
    from comlrl_lightning.errors import DataError

    pattern = str(tmp_path / "none" / "*.jsonl")
    with pytest.raises(DataError, match=rf"^train_dataset: json: data_files '{re.escape(pattern)}' matches no file\.$"):
        load_items(HFDataset("json", data_files=pattern))
    with pytest.raises(DataError, match=r"^eval_dataset: json: data_files \{'test': "):
        load_items(HFDataset("json", data_files={"test": pattern}), split="test", role="eval")


def test_a_damaged_save_to_disk_folder_is_named(tmp_path):
    import datasets

    from comlrl_lightning.errors import DataError

    folder = tmp_path / "saved"
    datasets.Dataset.from_list([{"prompt": "ab"}, {"prompt": "cd"}]).save_to_disk(str(folder))
    (arrow,) = folder.glob("*.arrow")
    arrow.unlink()
    with pytest.raises(DataError, match=rf"the save_to_disk folder {folder} cannot be read \({arrow} is missing\)"):
        load_items(str(folder))
    datasets.Dataset.from_list([{"prompt": "ab"}]).save_to_disk(str(tmp_path / "state"))
    (tmp_path / "state" / "state.json").write_text('{"_data_files": [\n  {"filename": ')
    with pytest.raises(DataError, match=rf"^train_dataset: {tmp_path}/state/state.json line 2 is not valid JSON"):
        load_items(str(tmp_path / "state"))


@pytest.mark.parametrize(
    "source",
    [
        "simplecache::http://127.0.0.1:9/tasks.jsonl",
        "https://127.0.0.1:9/tasks.json",
        HFDataset("hf://datasets/org/name"),
        HFDataset("json", data_files="https://127.0.0.1:9/tasks.jsonl"),
        HFDataset("json", data_files={"train": ["a.jsonl", "simplecache::http://127.0.0.1:9/b.jsonl"]}),
    ],
)
def test_remote_datasets_and_data_files_are_refused(source):
    from comlrl_lightning.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"^train_dataset(\.data_files)? '.*' is remote; only a local"):
        load_items(source)


class _Squares(ItemSet):
    def __init__(self, count: int = 3) -> None:
        self.count = count

    def items(self):
        return [{"prompt": str(i * i)} for i in range(self.count)]


def test_an_item_set_gives_its_items_and_a_non_dict_is_named():

    assert TaskOptions(train_dataset=_Squares(2)).train_items() == [{"prompt": "0"}, {"prompt": "1"}]

    class Broken(ItemSet):
        def items(self):
            return [{"prompt": "a"}, "b"]

    with pytest.raises(DataError, match="train_dataset: item 1 is a str"):
        TaskOptions(train_dataset=Broken()).train_items()
    with pytest.raises(NotImplementedError, match="ItemSet must implement items"):
        ItemSet().items()


# ---------------------------------------------------------------------------------------------
# Bounds on data files


def gzip_rows(path, mebibytes: int):
    """A gzip file of ``mebibytes`` MiB of one repeated row (about 1,000:1)."""
    import gzip

    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=9) as handle:
        for _ in range(mebibytes):
            handle.write(b'{"prompt": "a"}\n' * (1 << 16))
    return path


def test_a_gzip_bomb_in_data_files_is_refused_before_datasets_reads_it(tmp_path, monkeypatch):
    bomb = gzip_rows(tmp_path / "data" / "train.jsonl.gz", 12)
    assert bomb.stat().st_size < 100_000
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: calls.append(args))
    spec = HFDataset("json", data_files={"train": str(tmp_path / "data" / "*.gz")}, max_bytes=8 << 20)
    with pytest.raises(DataError) as error:
        load_items(spec)
    message = str(error.value)
    assert message.startswith(f"train_dataset: {bomb} expands past 8.0 MiB") and "max_bytes" in message, message
    with pytest.raises(DataError, match=rf"^eval_dataset: {bomb} expands past"):  # a folder's own files too
        load_items(HFDataset(str(tmp_path / "data"), max_bytes=1 << 20), role="eval")
    assert calls == []  # refused before datasets was asked


@pytest.mark.slow  # 80 MiB decompressed: the default ratio applies past 64 MiB
def test_the_default_ratio_refuses_a_bomb_under_the_size_bound(tmp_path, monkeypatch):
    bomb = gzip_rows(tmp_path / "train.jsonl.gz", 80)
    monkeypatch.setattr(datasets, "load_dataset", lambda *args, **kwargs: pytest.fail("datasets was asked"))
    with pytest.raises(DataError, match=rf"^train_dataset: {bomb} expands more than 100:1"):
        load_items(HFDataset("json", data_files=str(bomb)))


def test_data_files_within_the_bounds_load(tmp_path):
    import gzip

    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(row) + "\n" for row in ROWS).encode()))
    assert list(load_items(HFDataset("json", data_files=str(path), max_bytes=4096))) == ROWS


@pytest.mark.parametrize("options", [{"max_bytes": 0}, {"max_bytes": "4GiB"}, {"max_ratio": -1}, {"max_ratio": True}])
def test_bounds_that_cannot_work_are_named(options):
    with pytest.raises(ValueError, match=f"HFDataset {next(iter(options))} must be a positive"):
        HFDataset("json", **options)
