"""Wire formats of the API comparator: request bodies and response parsing.

Pure functions, no I/O. Four formats:

* ``generic`` -- one POST per prompt with the prompt, agent index, task item, candidate count and
  sampling settings; completions at a dotted path of the JSON response (for your own service);
* ``openai`` -- chat completions, ``n`` candidates per request (also for
  OpenAI-compatible servers: vLLM, SGLang, Ollama, DeepSeek, OpenRouter...);
* ``anthropic`` -- the messages API, one request per candidate;
* ``openai_responses`` -- OpenAI's responses API, one request per candidate.

A prompt rendered from a chat conversation (a :class:`~comlrl_lightning.tasks.chat.ChatPrompt`: the
data module's ``chat_template`` option, or chat-message prompts) reaches a chat format as that
conversation, never as the actor's template text, which the remote model would read as words;
``generic`` gets the rendered text as ``prompt`` and the conversation as ``messages``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Literal, Mapping, Optional, get_args

from comlrl_lightning.comparators.redaction import redact
from comlrl_lightning.errors import DataError
from comlrl_lightning.generation.base import GenerationSettings
from comlrl_lightning.tasks.chat import ChatPrompt, conversation_of
from comlrl_lightning.validation import OptionError

ApiFormat = Literal["generic", "openai", "anthropic", "openai_responses"]
"""The wire formats an API comparator speaks."""
API_FORMATS = get_args(ApiFormat)
ANTHROPIC_VERSION = "2023-06-01"
GENERIC_FALLBACK_FIELDS = ("completions", "responses", "outputs", "choices")


class ApiResponseError(DataError):
    """A response that is valid JSON but not the shape its format promises."""


def is_deepseek(url: str, model: Optional[str]) -> bool:
    """DeepSeek's chat endpoint rejects ``n > 1``."""
    return "api.deepseek.com" in url.lower() or str(model or "").lower().startswith("deepseek-")


def openai_batch_sizes(remaining: int, max_n: Optional[int], url: str, model: Optional[str], wanted: int) -> List[int]:
    """``n`` of each chat request that together ask for ``remaining`` candidates.

    The per-request cap is ``max_n_per_request`` clamped to ``[1, wanted]``, else 1
    for DeepSeek, else ``wanted`` (one request).
    """
    if max_n is not None:
        cap = min(max(int(max_n), 1), wanted)
    else:
        cap = 1 if is_deepseek(url, model) else wanted
    cap = max(cap, 1)
    sizes = []
    while remaining > 0:
        sizes.append(min(cap, remaining))
        remaining -= sizes[-1]
    return sizes


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy: containers recursively, ``.tolist()``/``.item()`` for arrays and scalars, else ``str``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # strict JSON has no NaN/Infinity
    if isinstance(value, Mapping):
        return {str(key): json_safe(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(inner) for inner in value]
    if hasattr(value, "tolist") and callable(value.tolist):  # torch tensors, numpy arrays and scalars
        try:
            return json_safe(value.tolist())
        except Exception:  # noqa: BLE001 - fall through to str for exotic objects
            pass
    if hasattr(value, "item") and callable(value.item):
        try:
            return json_safe(value.item())
        except Exception:  # noqa: BLE001
            pass
    return str(value)


def _merge(body: Dict[str, Any], extra_body: Optional[Mapping[str, Any]], drop_none: bool) -> Dict[str, Any]:
    merged = {**body, **(dict(extra_body) if extra_body else {})}
    # Provider formats drop None, so a null in extra_body removes a default field.
    return {k: v for k, v in merged.items() if v is not None} if drop_none else merged


def request_body(
    api_format: str,
    prompt: str,
    agent_index: int,
    item: Mapping[str, Any],
    count: int,
    settings: GenerationSettings,
    model: Optional[str],
    extra_body: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    """The JSON body of one request asking for ``count`` candidates (``count`` is ``n`` for openai, else ignored
    by the one-candidate formats)."""
    chat = isinstance(prompt, ChatPrompt)
    if api_format == "generic":
        body: Dict[str, Any] = {
            "prompt": str(prompt),
            "agent_idx": agent_index,
            "num_return_sequences": count,
            "max_new_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "top_k": settings.top_k,
            "batch_item": json_safe(item),
        }
        if model:
            body["model"] = model
        if chat:
            body["messages"] = conversation_of(prompt)
        return _merge(body, extra_body, drop_none=False)
    messages = conversation_of(prompt)
    if api_format == "openai":
        body = {
            "model": model,
            "messages": messages,
            "n": count,
            "max_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
        }
    elif api_format == "anthropic":
        # the messages API takes system text beside the messages, not as a message
        system = [str(m["content"]) for m in messages if m.get("role") == "system"]
        body = {
            "model": model,
            "max_tokens": settings.max_new_tokens,
            "messages": [m for m in messages if m.get("role") != "system"],
            "temperature": settings.temperature,
        }
        if system:
            body["system"] = "\n\n".join(system)
    elif api_format == "openai_responses":
        body = {
            "model": model,
            "input": messages if chat else str(prompt),
            "max_output_tokens": settings.max_new_tokens,
        }
    else:
        raise OptionError(f"format must be one of: {', '.join(API_FORMATS)} (got {api_format!r}).")
    return _merge(body, extra_body, drop_none=True)


def candidates_per_request(api_format: str) -> Optional[int]:
    """1 for the one-candidate formats; ``None`` when the request carries its own count."""
    return 1 if api_format in ("anthropic", "openai_responses") else None


# ----------------------------------------------------------------------------------------------
# Responses


def snippet(payload: Any, limit: int = 300) -> str:
    """The first ``limit`` characters of a response, secrets redacted *before* the cut (no key prefix)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    # cut long before the limit first (a key run cut there is still redacted: runs are matched in part)
    text = redact(" ".join(text[: 200 * limit].split()))
    return text if len(text) <= limit else text[:limit] + "..."


def _require(payload: Any, field: str, api_format: str) -> List[Any]:
    """``payload[field]``, a list (``null``: empty), or :class:`ApiResponseError` quoting the payload."""
    if not isinstance(payload, dict) or field not in payload:
        raise ApiResponseError(
            f"Comparator API response has no {field!r} field, which the {api_format} format requires: {snippet(payload)}"
        )
    value = payload[field]
    if value is not None and not isinstance(value, list):
        raise ApiResponseError(
            f"Comparator API response's {field!r} is a {type(value).__name__}, not the list the {api_format} "
            f"format requires: {snippet(payload)}"
        )
    return value or []


def _text_of(content: Any) -> Optional[str]:
    # Chat content is usually a string; some compatible servers return a list of typed parts.
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def parse_openai(payload: Any) -> List[str]:
    """``choices[].message.content``, else ``choices[].text`` (legacy completions)."""
    choices = _require(payload, "choices", "openai")
    texts = []
    for choice_ in choices:
        if not isinstance(choice_, dict):
            continue
        message = choice_.get("message")
        text = _text_of(message.get("content")) if isinstance(message, dict) else None
        if text is None:
            text = _text_of(choice_.get("text"))
        if text is not None:
            texts.append(text)
    return texts


def parse_anthropic(payload: Any) -> List[str]:
    """The first content block of type ``text`` (thinking and tool-use blocks are skipped)."""
    for block in _require(payload, "content", "anthropic"):
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return [block["text"]]
    return []


def parse_openai_responses(payload: Any) -> List[str]:
    """The first ``output_text``/``text`` block among ``output[].content[]`` (reasoning items have none)."""
    for entry in _require(payload, "output", "openai_responses"):
        content = entry.get("content") if isinstance(entry, dict) else None
        for block in content if isinstance(content, list) else []:
            if (
                isinstance(block, dict)
                and block.get("type") in ("output_text", "text")
                and isinstance(block.get("text"), str)
            ):
                return [block["text"]]
    return []


def _at_path(payload: Any, path: str) -> Any:
    """Value at a dotted path (integers index lists); ``KeyError`` when absent."""
    value = payload
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(path)
    return value


def normalise_completions(value: Any) -> List[str]:
    """As the reference: None -> []; str -> [str]; a non-list -> [str(v)]; list items: str, or a dict's first
    truthy ``text``/``content``/``completion``/``response``, else ``message.content``; None items are skipped."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return [str(value)]
    texts = []
    for entry in value:
        if entry is None:
            continue
        if isinstance(entry, str):
            texts.append(entry)
        elif isinstance(entry, dict):
            found = next((entry[k] for k in ("text", "content", "completion", "response") if entry.get(k)), None)
            if found is None and isinstance(entry.get("message"), dict):
                found = entry["message"].get("content")
            if found is not None:
                texts.append(found if isinstance(found, str) else str(found))
        else:
            texts.append(str(entry))
    return texts


def parse_generic(payload: Any, response_field: str) -> List[str]:
    """Completions at ``response_field``; if absent, the first truthy top-level completions/responses/outputs/choices."""
    if isinstance(payload, list):  # a bare list is the completions themselves
        return normalise_completions(payload)
    try:
        return normalise_completions(_at_path(payload, response_field))
    except KeyError:
        pass
    if isinstance(payload, dict):
        for field in GENERIC_FALLBACK_FIELDS:
            if payload.get(field):
                return normalise_completions(payload[field])
    raise ApiResponseError(
        f"Comparator API response has no completions at response_field={response_field!r} "
        f"(nor at {', '.join(GENERIC_FALLBACK_FIELDS)}): {snippet(payload)}"
    )


def parse_response(api_format: str, payload: Any, response_field: str) -> List[str]:
    """The completion texts of one response of ``api_format``."""
    if api_format == "openai":
        return parse_openai(payload)
    if api_format == "anthropic":
        return parse_anthropic(payload)
    if api_format == "openai_responses":
        return parse_openai_responses(payload)
    return parse_generic(payload, response_field)
