"""Credentials never in the config: refused where a config would store them, by name, shape and value.

The config (every option of every part) is written to ``config.yaml``, ``hparams.yaml``, each
checkpoint and a W&B run's files, so a key in any option leaks everywhere. The API comparator
takes its key only from the environment variable ``key_env`` names; everything here refuses a
credential elsewhere, with a message naming the place and never the value:

* by name: URL userinfo, a URL query or fragment parameter, a header, or an ``extra_body`` field
  whose name says credential (``api_key``, ``X-Auth-Token``, ``Authorization``, ``Cookie``,
  ``X-Hub-Signature``, ``*Secret*``, ``*Token*``, ``X-Api-Sig``, ``sig``...: see
  :func:`_named_credential`), whatever its value;
* by shape, whatever the name: a value that looks like a credential (:data:`CREDENTIAL_SHAPE`:
  ``Bearer ...``, ``sk-...`` and other providers' key formats, a JWT) in a header, in
  ``extra_body``, or anywhere in the URL (path, query, fragment);
* by value: the key itself (read from ``key_env`` when it is set; :data:`SEARCHED_KEY_LENGTH`
  characters or more), in any option, in any encoding.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator, Mapping, Optional, Tuple
from urllib.parse import parse_qsl, unquote, urlsplit

from comlrl_lightning.comparators.redaction import STORED_SECRET_LENGTH, contains_secret
from comlrl_lightning.validation import OptionError, require

CREDENTIAL_WORDS = (
    "auth",
    "token",
    "key",
    "secret",
    "cookie",
    "password",
    "passwd",
    "signature",
    "credential",
    "session",
    "bearer",
    "hmac",
    "jwt",
)
"""A header or URL parameter whose name contains one of these carries a credential: refused."""
CREDENTIAL_NAME_PARTS = ("sig", "sign", "signed", "pass", "pwd", "sas", "sid", "otp")
"""A header or URL parameter with one of these as a word of its name (split at ``-``, ``_``, ``.``
and lower-to-upper case changes: ``X-Api-Sig``, ``XApiSig``) carries a credential too."""
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
CREDENTIAL_PARAMETERS = ("sig", "code")
"""URL parameters that carry one under a short name (Azure's SAS ``sig``, Azure Functions' ``code``)."""
CREDENTIAL_FIELD = re.compile(
    r"(?:^|[_.-])(?:api[_.-]?key|apikey|key|secret|password|passwd|token|access[_.-]?token|auth|authorization"
    r"|credentials?|signature|sig|bearer|cookie)$",
    re.IGNORECASE,
)
"""An ``extra_body`` field name that carries a credential (``max_tokens`` does not: it ends in ``tokens``)."""
CREDENTIAL_SHAPE = re.compile(
    r"\bbearer\s+\S{8,}"  # an Authorization header's value
    r"|\bsk-[A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic (sk-ant-), DeepSeek and compatible keys
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|\bxox[abpr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|\bAIza[0-9A-Za-z_-]{30,}"  # Google API keys
    r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face tokens
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.",  # a JSON web token
    re.IGNORECASE,
)
"""Values that look like a credential whatever they are called."""
SEARCHED_KEY_LENGTH = STORED_SECRET_LENGTH
"""Keys at least this long are searched for in the config (a shorter value, such as a local server's
``x``, is no secret and would match ordinary text)."""
USE_KEY_ENV = (
    "the config is saved to config.yaml, hparams, checkpoints and W&B. Put the key in an environment "
    "variable and name it in key_env (key_header and key_prefix say how it is sent)."
)


def _named_credential(name: str) -> bool:
    """Whether a header or URL parameter name says credential (:data:`CREDENTIAL_WORDS` anywhere in
    it, :data:`CREDENTIAL_NAME_PARTS` as one of its words, or a :data:`CREDENTIAL_PARAMETERS` name)."""
    lowered = str(name).lower()
    words = {word.lower() for word in _NAME_WORDS.findall(str(name))}
    return (
        any(word in lowered for word in CREDENTIAL_WORDS)
        or bool(words & set(CREDENTIAL_NAME_PARTS))
        or lowered in CREDENTIAL_PARAMETERS
    )


def _shaped(value: str) -> bool:
    return bool(CREDENTIAL_SHAPE.search(value) or CREDENTIAL_SHAPE.search(unquote(value)))


def strings(value: Any, place: str) -> Iterator[Tuple[str, str]]:
    """Every string in ``value`` (a nested mapping or list, keys included) with where it is."""
    if isinstance(value, str):
        yield place, value
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield f"{place}.{key} (its name)", str(key)
            yield from strings(inner, f"{place}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            yield from strings(inner, f"{place}[{index}]")


def _fields(value: Any, place: str) -> Iterator[str]:
    """The dotted place of every mapping key in ``value`` whose name says credential."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if CREDENTIAL_FIELD.search(str(key)):
                yield f"{place}.{key}"
            yield from _fields(inner, f"{place}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            yield from _fields(inner, f"{place}[{index}]")


def check_no_credentials(url: str, headers: Mapping[str, str], extra_body: Optional[Mapping[str, Any]] = None) -> None:
    """Refuse credentials where the config would store them: in ``url`` (userinfo, a credential-named
    query or fragment parameter, a credential-shaped path, query or fragment), in ``headers`` (by
    name or by value) and in ``extra_body`` (by field name or by value)."""
    parts = urlsplit(str(url))
    require(
        parts.username is None and parts.password is None,
        f"url must not carry credentials (user:password@host): {USE_KEY_ENV}",
    )
    for where, text in (("query", parts.query), ("fragment", parts.fragment)):
        for name, _ in parse_qsl(text, keep_blank_values=True):
            require(
                not _named_credential(name),
                f"url must not carry a credential in its {where} ({name}=...): {USE_KEY_ENV}",
            )
    for where, text in (("path", parts.path), ("query", parts.query), ("fragment", parts.fragment)):
        require(not _shaped(text), f"url must not carry a credential: its {where} holds one: {USE_KEY_ENV}")
    for name, value in headers.items():
        require(not _named_credential(name), f"headers must not carry a credential ({name}): {USE_KEY_ENV}")
        require(not _shaped(str(value)), f"headers must not carry a credential (the value of {name}): {USE_KEY_ENV}")
    for place in _fields(extra_body or {}, "extra_body"):
        raise OptionError(f"extra_body must not carry a credential ({place}): {USE_KEY_ENV}")
    for place, text in strings(extra_body or {}, "extra_body"):
        require(not _shaped(text), f"extra_body must not carry a credential ({place} holds one): {USE_KEY_ENV}")


def check_no_key(options: Mapping[str, Any], key: Optional[str], key_env: str) -> None:
    """Refuse the key's value in any of ``options`` (name -> value, nested values searched), in any
    encoding; the message names the option and the variable, never the key."""
    if not key or len(key) < SEARCHED_KEY_LENGTH:
        return
    for name, value in options.items():
        for place, text in strings(value, name):
            require(
                not contains_secret(text, key),
                f"{place} holds the value of {key_env}, the comparator's key: {USE_KEY_ENV}",
            )


def check_config_has_no_key(config: Mapping[str, Any]) -> None:
    """Refuse a whole config (as saved: nested mappings) that holds the value of any variable a
    ``key_env`` in it names; the message names the place and the variable, never the value."""
    names = {text for place, text in strings(config, "") if place.endswith("key_env")}
    for name in sorted(names):
        key = os.environ.get(name, "").strip()
        for place, text in strings(config, "") if len(key) >= SEARCHED_KEY_LENGTH else ():
            require(
                not contains_secret(text, key),
                f"{place.lstrip('.')} holds the value of {name}, the comparator's key: {USE_KEY_ENV}",
            )


__all__ = [
    "CREDENTIAL_SHAPE",
    "USE_KEY_ENV",
    "check_config_has_no_key",
    "check_no_credentials",
    "check_no_key",
    "strings",
]
