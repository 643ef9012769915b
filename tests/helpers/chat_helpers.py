"""Tokenizers with chat templates for the tests: the embedded model's characters, two templates."""

from __future__ import annotations

from comlrl_lightning.defaults import build_char_tokenizer

# Both templates use only the embedded model's character vocabulary, so the tiny model reads them.
TEMPLATE_A = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
TEMPLATE_B = (
    "{% for m in messages %}-- {{ m['role'] }} says; {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}-- reply;{% endif %}"
)


def tokenizer_with(template):
    """The embedded model's character tokenizer with ``template`` as its chat template."""
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = template
    return tokenizer


def rendered(template, messages):
    """``messages`` rendered with ``template``, ready for the assistant's turn."""
    return tokenizer_with(template).apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
