"""The names of :mod:`comlrl_lightning.tasks.chat` under the path they had before it moved (configs, checkpoints
and scripts written before keep working); new code imports them from there."""

from comlrl_lightning.tasks.chat import (
    CHAT_TEMPLATE_OPTION,
    MESSAGES_GIVEN,
    OPTION_ON,
    AgentPrompt,
    ChatPrompt,
    ChatTemplateError,
    Conversation,
    Message,
    PromptRenderer,
    check_agent_prompt,
    clean_conversation,
    conversation_of,
    conversation_problem,
    has_chat_template,
    is_conversation,
    missing_template,
    prompt_text,
    render_conversation,
)

__all__ = [
    "AgentPrompt",
    "CHAT_TEMPLATE_OPTION",
    "ChatPrompt",
    "ChatTemplateError",
    "Conversation",
    "MESSAGES_GIVEN",
    "Message",
    "OPTION_ON",
    "PromptRenderer",
    "check_agent_prompt",
    "clean_conversation",
    "conversation_of",
    "conversation_problem",
    "has_chat_template",
    "is_conversation",
    "missing_template",
    "prompt_text",
    "render_conversation",
]
