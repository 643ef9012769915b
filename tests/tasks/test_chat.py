"""Chat prompts: conversations rendered with each agent's own chat template, everywhere prompts go."""

from __future__ import annotations

import json
from types import SimpleNamespace

import datasets
import pytest

from comlrl_lightning import (
    MADPOModule,
    MAGRPOModule,
    PreferenceDataModule,
    TaskDataModule,
    TaskOptions,
)
from comlrl_lightning.comparators import CentralizedComparator, CurrentComparator
from comlrl_lightning.comparators.api_formats import request_body
from comlrl_lightning.defaults import (
    build_char_tokenizer,
    toy_items,
    vowel_length_reward,
)
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.generation.hf import HFGenerator
from comlrl_lightning.modules.collaboration import Centralized
from comlrl_lightning.rounds.records import pair_from_record
from comlrl_lightning.tasks.centralized_task import DelimitedAdapter
from comlrl_lightning.tasks.chat import (
    ChatPrompt,
    ChatTemplateError,
    PromptRenderer,
    conversation_of,
    prompt_text,
)
from comlrl_lightning.tasks.task import Task, check_items, default_formatter
from comlrl_lightning.team.loading import encode_prompt
from tests.conftest import TINY_DATA, TINY_MODEL, tiny_sampling, tiny_task, tiny_team, tiny_trainer
from tests.helpers.chat_helpers import TEMPLATE_A, TEMPLATE_B, rendered, tokenizer_with
from tests.helpers.iterative_run import make_run

SYSTEM = {"role": "system", "content": "write vowels"}


def writer_messages(item):
    """Agent 0's formatter: a conversation (system + user)."""
    return [SYSTEM, {"role": "user", "content": f"topic: {item['prompt']}"}]


def reward_seeing_prompts(seen):
    def reward(writer, matcher, prompts=None):
        seen.append(prompts[0])
        return vowel_length_reward(writer, matcher)

    return reward


# ---------------------------------------------------------------------------------------------
# Prompts, formatters, rendering


def test_each_agent_renders_its_own_template_and_text_stays_text_when_the_option_is_off():
    task = Task([writer_messages, "topic: {prompt}"], vowel_length_reward, num_agents=2)
    team_task = task.for_team(lambda: [tokenizer_with(TEMPLATE_A), tokenizer_with(TEMPLATE_B)])
    first, second = team_task.prompts({"prompt": "abc"})
    assert first == "system: write vowels\nuser: topic: abc\nassistant:"
    assert isinstance(first, ChatPrompt) and first.messages == writer_messages({"prompt": "abc"})
    assert second == "topic: abc" and type(second) is str  # chat_template off: the text as it is
    assert task.agent_prompts({"prompt": "abc"})[0] == writer_messages({"prompt": "abc"})


def test_the_option_templates_text_prompts_as_one_user_message_with_each_agents_template():
    task = Task("topic: {prompt}", vowel_length_reward, num_agents=2, chat_template=True)
    team_task = task.for_team(lambda: [tokenizer_with(TEMPLATE_A), tokenizer_with(TEMPLATE_B)])
    assert team_task.prompts({"prompt": "xy"}) == ["user: topic: xy\nassistant:", "-- user says; topic: xy\n-- reply;"]
    assert conversation_of(team_task.prompts({"prompt": "xy"})[1]) == [{"role": "user", "content": "topic: xy"}]


def test_items_may_carry_the_conversation_in_prompt_or_messages():
    conversation = [{"role": "user", "content": "hi"}]
    assert default_formatter({"prompt": conversation}) is conversation
    assert default_formatter({"messages": conversation}) is conversation
    assert default_formatter({"prompt": "text", "messages": conversation}) == "text"  # prompt first
    with pytest.raises(
        TypeError,
        match=r"field 'prompt' is a list, expected a string or a list of chat messages "
        r"\(message 0 has no 'role' string\)",
    ):
        default_formatter({"prompt": [{"content": "no role"}]})
    with pytest.raises(TypeError, match="field 'messages' is a str, expected a list of chat messages"):
        default_formatter({"messages": "hi"})
    with pytest.raises(TypeError, match="formatter 1 returned a list that is not a chat conversation: it is empty"):
        Task([None, lambda item: []], vowel_length_reward).agent_prompts({"prompt": "p"})


def test_none_valued_keys_of_dataset_messages_are_dropped_before_rendering():
    # a datasets table gives every message every key any message has, with None where it had none
    messages = [{"role": "user", "content": "hi", "name": None}]
    prompt = PromptRenderer(lambda: [tokenizer_with(TEMPLATE_A)], False).render(0, messages)
    assert prompt == "user: hi\nassistant:" and prompt.messages == [{"role": "user", "content": "hi"}]


def test_a_missing_template_is_an_error_naming_the_agent_and_the_option():
    plain = build_char_tokenizer()
    task = Task("{prompt}", vowel_length_reward, num_agents=2, chat_template=True)
    with pytest.raises(
        ChatTemplateError,
        match=r"^agent 1's tokenizer has no chat template, but the data module's "
        r"chat_template option is on\..*chat_template option off",
    ):
        task.for_team(lambda: [tokenizer_with(TEMPLATE_A), plain])

    # chat messages for an agent without a template: an error naming the item, found before any sampling
    def messages_for_b(item):
        return writer_messages(item) if item["prompt"] == "b" else item["prompt"]

    messages_task = Task([None, messages_for_b], vowel_length_reward).for_team(lambda: [plain, plain])
    with pytest.raises(
        ValueError,
        match=r"^train_dataset: item 1: agent 1's tokenizer has no chat template, but its "
        r"prompt is a list of chat messages",
    ):
        check_items(messages_task, [{"prompt": "a"}, {"prompt": "b"}], "train")


def test_a_run_with_the_option_on_and_an_agent_without_a_template_fails_before_any_sampling(tmp_path):
    class NoSampling(HFGenerator):
        def generate(self, *args, **kwargs):
            raise AssertionError("sampled")

    module = MADPOModule(
        **{**TINY_MODEL, "team": tiny_team(tokenizers=[tokenizer_with(TEMPLATE_A), build_char_tokenizer()])},
        generator=NoSampling(),
    )
    data = PreferenceDataModule(**{**TINY_DATA, "task": tiny_task(chat_template=True)})
    with pytest.raises(ChatTemplateError, match="agent 1's tokenizer has no chat template"):
        tiny_trainer(tmp_path).fit(module, data)
    assert module._team is None  # not even a model was loaded


def test_a_task_without_the_teams_tokenizers_cannot_render():
    with pytest.raises(ChatTemplateError, match="agent 0's prompt needs its tokenizer's chat template"):
        Task(writer_messages, vowel_length_reward).prompts({"prompt": "a"})


def test_text_prompts_never_load_a_tokenizer_when_nothing_needs_a_template():
    def no_tokenizers():
        raise AssertionError("tokenizers loaded")

    assert Task("{prompt}", vowel_length_reward).for_team(no_tokenizers).prompts({"prompt": "a"}) == ["a", "a"]


def test_a_template_that_starts_with_bos_gets_one_bos_in_sampling_and_in_re_tokenized_records():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<eos>", "<unk>", "<bos>", *"abcdefghijklmnopqrstuvwxyz: \n"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}\n{% endfor %}a:"
    assert (
        encode_prompt(tokenizer, "hi")
        == tokenizer("hi")["input_ids"]
        == [2, *tokenizer("hi", add_special_tokens=False)["input_ids"]]
    )
    text = PromptRenderer(lambda: [tokenizer], True).render(0, "hi")
    assert text.startswith("<bos>")
    ids = encode_prompt(tokenizer, text)
    assert ids.count(2) == 1 and ids[0] == 2
    record = {"prompts": [str(text)], "winner_completions": ["a"], "loser_completions": ["b"]}
    team = SimpleNamespace(tokenizers=[tokenizer], num_agents=1)
    assert pair_from_record(record, team).prompt_ids == [ids]


# ---------------------------------------------------------------------------------------------
# Runs: a heterogeneous team, centralized teams, rollouts


@pytest.mark.slow  # seconds, not milliseconds: kept out of the everyday tier
def test_a_team_with_two_chat_templates_trains_iteratively_and_its_round_files_keep_the_rendered_prompts(tmp_path):
    seen = []
    tokenizers = [tokenizer_with(TEMPLATE_A), tokenizer_with(TEMPLATE_B)]
    module, datamodule, trainer = make_run(
        tmp_path,
        max_epochs=2,
        model=dict(team=tiny_team(tokenizers=tokenizers)),
        data=dict(
            task=tiny_task(
                formatters=[writer_messages, "topic: {prompt}"],
                chat_template=True,
                reward_func=reward_seeing_prompts(seen),
            ),
            num_iterations=2,
            num_train_epochs=1,
        ),
    )
    trainer.fit(module, datamodule)
    assert module.team.tokenizers == tokenizers and module.global_step > 0
    expected = {
        (
            rendered(TEMPLATE_A, writer_messages(item)),
            rendered(TEMPLATE_B, [{"role": "user", "content": f"topic: {item['prompt']}"}]),
        )
        for item in datamodule.train_items
    }
    assert all(first.startswith("system: write vowels\nuser: topic: ") for first, _ in expected)
    assert all(second.startswith("-- user says; topic: ") for _, second in expected)
    files = sorted((tmp_path / "preference_replay").glob("iteration_*.json"))
    assert [f.name for f in files] == ["iteration_0001.json", "iteration_0002.json"]
    records = json.loads(files[-1].read_text(encoding="utf-8"))["pairs"]
    assert records and all(tuple(record["prompts"]) in expected for record in records)
    # re-tokenized records give exactly the prompt ids the team sampled and scored
    collected = datamodule.last_collection.pairs
    assert [pair_from_record(r, module.team).prompt_ids for r in records] == [p.prompt_ids for p in collected]
    assert [pair.prompt_ids for pair in collected] == [
        [tokenizers[agent](record["prompts"][agent])["input_ids"] for agent in range(2)] for record in records
    ]
    # the reward saw agent 0's rendered prompt in collection and in evaluation
    assert set(seen) <= {first for first, _ in expected} | {
        rendered(TEMPLATE_A, writer_messages(item)) for item in datamodule.evaluation_items()
    }
    assert {first for first, _ in expected} <= set(seen)


def test_a_centralized_team_renders_the_joint_prompt_with_its_template_and_trains(tmp_path):
    seen = []
    adapter = DelimitedAdapter(separator=";", prompt_template=None, missing="empty")
    module = MADPOModule(
        **{
            **TINY_MODEL,
            "sampling": tiny_sampling(max_new_tokens=8),
            "team": tiny_team(tokenizers=tokenizer_with(TEMPLATE_A)),
        },
        collaboration=Centralized(adapter),
    )
    task = tiny_task(formatters=[writer_messages, "matcher: {prompt}"], reward_func=reward_seeing_prompts(seen))
    data = PreferenceDataModule(**{**TINY_DATA, "task": task, "num_train_epochs": 1, "eval_num_samples": 0})
    tiny_trainer(tmp_path, max_epochs=1).fit(module, data)
    (joint,) = data.task.prompts({"prompt": "ab"})
    # the roles' texts (a conversation's contents) make the joint prompt, one user turn of the model's template
    roles = ["write vowels\n\ntopic: ab", "matcher: ab"]
    assert joint == rendered(TEMPLATE_A, [{"role": "user", "content": adapter.build_prompt({}, roles)}])
    assert data.pairs and all(pair.prompts[0].startswith("user: write vowels\n\ntopic: ") for pair in data.pairs)
    assert "write vowels\n\ntopic: " in seen[0] and not seen[0].startswith("user:")  # the roles' reward gets role texts


def test_policy_gradient_rollouts_and_their_reward_see_the_rendered_prompts(tmp_path):
    seen = []
    module = MAGRPOModule(
        **{**TINY_MODEL, "team": tiny_team(tokenizers=[tokenizer_with(TEMPLATE_A), tokenizer_with(TEMPLATE_B)])},
        num_generations=2,
    )
    # a datasets.Dataset: the item loader serves batches straight from its table
    table = datasets.Dataset.from_list(toy_items(8))
    task = TaskOptions(
        train_dataset=table, formatters="topic: {prompt}", chat_template=True, reward_func=reward_seeing_prompts(seen)
    )
    data = TaskDataModule(task=task, train_batch_size=4, num_train_epochs=1)
    tiny_trainer(tmp_path, max_epochs=1, limit_train_batches=1).fit(module, data)
    assert len(seen) == 4 * 2 and set(seen) <= {f"user: topic: {item['prompt']}\nassistant:" for item in toy_items(8)}


# ---------------------------------------------------------------------------------------------
# Comparators


def test_api_chat_formats_get_the_conversation_never_the_actors_template():
    settings = GenerationSettings(8, 1.0, 1.0, None)
    conversation = [SYSTEM, {"role": "user", "content": "topic: ab"}]
    prompt = ChatPrompt(rendered(TEMPLATE_A, conversation), conversation)
    openai = request_body("openai", prompt, 0, {}, 2, settings, "m", None)
    assert openai["messages"] == conversation
    anthropic = request_body("anthropic", prompt, 0, {}, 1, settings, "m", None)
    assert anthropic["system"] == "write vowels" and anthropic["messages"] == conversation[1:]
    assert request_body("openai_responses", prompt, 0, {}, 1, settings, "m", None)["input"] == conversation
    generic = request_body("generic", prompt, 0, {}, 1, settings, None, None)
    assert generic["prompt"] == str(prompt) and generic["messages"] == conversation
    # a text prompt is sent as before: one user message, no messages field for generic
    assert request_body("openai", "plain", 0, {}, 1, settings, "m", None)["messages"] == [
        {"role": "user", "content": "plain"}
    ]
    assert "messages" not in request_body("generic", "plain", 0, {}, 1, settings, None, None)
    assert "system" not in request_body("anthropic", "plain", 0, {}, 1, settings, "m", None)


def test_a_centralized_comparator_builds_its_joint_prompt_from_the_agents_conversations():
    from comlrl_lightning.comparators import ComparatorContext

    built = []

    class Recording(DelimitedAdapter):
        def build_prompt(self, batch_item, agent_prompts):
            built.append(list(agent_prompts))
            return super().build_prompt(batch_item, agent_prompts)

    tokenizers = [tokenizer_with(TEMPLATE_A), tokenizer_with(TEMPLATE_B)]
    comparator = CentralizedComparator(source=CurrentComparator(), adapter=Recording(), agent_index=1)
    team = SimpleNamespace(tokenizers=tokenizers, num_agents=2)
    comparator.bind(
        ComparatorContext(actors=lambda: team, generator=HFGenerator(), stream=None, agent_devices=["cpu", "cpu"])
    )
    conversations = [writer_messages({"prompt": "ab"}), [{"role": "user", "content": "topic: ab"}]]
    prompts = [PromptRenderer(lambda: tokenizers, False).render(a, c) for a, c in enumerate(conversations)]
    joint = comparator.joint_prompt({"prompt": "ab"}, prompts)
    assert built == [[prompt_text(c) for c in conversations]]
    assert joint == rendered(
        TEMPLATE_B,
        [{"role": "user", "content": "write vowels\n\ntopic: ab\ntopic: ab\nanswer every role, separated by ;:"}],
    )
    assert isinstance(joint, ChatPrompt)  # an API source would get the joint message, not agent 1's template
    assert (
        comparator.joint_prompt({"prompt": "ab"}, ["topic: ab", "topic: ab"])
        == "topic: ab\ntopic: ab\nanswer every role, separated by ;:"
    )
