"""The API comparator: a remote model answers the agents' prompts.

For every agent and task item the comparator asks the endpoint for ``K'`` completions of that
agent's prompt, in the wire format of its ``format`` (see :mod:`.api_formats`), through
the retrying, concurrent :class:`~.api_client.ApiClient`. The texts get token ids from each
actor's tokenizer (the remote model's tokens are unknown).

A provider may return fewer completions than asked (an empty ``choices`` list, a filtered answer,
a server that ignores ``n``). What came back is used; because joint responses pair candidate ``j``
of every agent, all agents of an item are cut to the smallest count, and the candidates lost are
reported as ``comparator/api_shortfall``. Only a round without a single usable candidate is an
error. Any failed request raises before the round file is written, so the last checkpoint
resumes into a clean redo of the round. Every completion text is redacted of the key's value
(:func:`~.redaction.redact_stored`: whole or in part, in any encoding) as it arrives, before it
is tokenized, so an endpoint that echoes the key never puts it into a round file, a checkpoint
or a log.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from comlrl_lightning.comparators.api_client import (
    ApiClient,
    ComparatorApiError,
    HttpOptions,
    shown_url,
)
from comlrl_lightning.comparators.api_formats import (
    API_FORMATS,
    ApiFormat,
    openai_batch_sizes,
    parse_response,
    request_body,
)
from comlrl_lightning.comparators.base import Comparator
from comlrl_lightning.comparators.credentials import USE_KEY_ENV, check_no_credentials, check_no_key
from comlrl_lightning.comparators.redaction import redact_stored
from comlrl_lightning.generation.base import Completion, GenerationSettings
from comlrl_lightning.team.team import Team
from comlrl_lightning.validation import at_least, require

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ApiJob(NamedTuple):
    """One prompt to ask the endpoint about."""

    prompt: str
    agent_index: int
    item: Dict[str, Any]


class ApiComparator(Comparator):
    """``K'`` completions of every agent's prompt from a remote endpoint.

    Chat prompts (the data module's ``chat_template`` option, or chat-message prompts) are sent as
    their conversation, not as the actor's rendered template: the chat formats send the messages
    (``anthropic``: system messages as ``system``), ``generic`` sends the rendered text as
    ``prompt`` and the conversation as ``messages``. The answers are tokenized with the actors'
    tokenizers like any other completion.

    Credentials come only from the environment: ``key_env`` names the variable, read at request
    time; a credential-looking header is refused, because the config (with every option) is
    written to ``config.yaml``, ``hparams.yaml`` and each checkpoint.

    Args:
        url: the endpoint (for ``openai``, e.g. ``https://api.openai.com/v1/chat/completions``).
        format: wire format: ``generic`` (your own service), ``openai`` (chat completions, also any
            OpenAI-compatible server), ``anthropic`` (messages) or ``openai_responses``.
        model: model name sent in the request body.
        key_env: NAME of the environment variable holding the key (there is deliberately no option
            for the key itself); ``None``: no key is sent.
        key_header: header carrying the key (``x-api-key`` for ``anthropic`` by default).
        key_prefix: text before the key in that header (empty: the bare key).
        headers: extra HTTP headers (never a credential).
        response_field: dotted path of the completions in a ``generic`` response.
        extra_body: merged over the request body (``null`` values remove provider-format fields).
        max_n_per_request: cap on ``n`` per ``openai`` request (default K'; 1 for DeepSeek).
        http: how requests are sent (:class:`~comlrl_lightning.comparators.api_client.HttpOptions`:
            ``timeout``, ``deadline``, ``max_response_bytes``, ``concurrency``, ``max_retries``).
        num_candidates: K' (``None``: K).
    """

    backoff_base: float = 1.0
    """Seconds before the first retry (doubled each time, jittered); not a config option."""
    retry_after_cap: float = 60.0
    """Longest ``Retry-After`` honoured, in seconds; not a config option."""

    def __init__(
        self,
        url: str,
        format: ApiFormat = "generic",
        model: Optional[str] = None,
        key_env: Optional[str] = None,
        key_header: str = "Authorization",
        key_prefix: str = "Bearer",
        headers: Optional[Dict[str, str]] = None,
        response_field: str = "completions",
        extra_body: Optional[Dict[str, Any]] = None,
        max_n_per_request: Optional[int] = None,
        http: HttpOptions = HttpOptions(),
        num_candidates: Optional[int] = None,
    ) -> None:
        super().__init__(num_candidates)
        require(bool(url and str(url).strip()), "ApiComparator needs a url.")
        require(format in API_FORMATS, f"format must be one of: {', '.join(API_FORMATS)}.")
        at_least("max_n_per_request", max_n_per_request, 1, allow_none=True)
        headers = dict(headers or {})
        require(all(isinstance(v, str) for v in headers.values()), "headers must map header names to strings.")
        require(extra_body is None or isinstance(extra_body, dict), "extra_body must be a mapping.")
        check_no_credentials(url, headers, extra_body)
        for name in headers:
            require(
                str(name).lower() != key_header.lower(),
                f"headers must not carry the credential ({name}): {USE_KEY_ENV}",
            )
        if key_env is not None:
            # Never echo the value: it may be a key pasted into the wrong option.
            require(
                bool(_ENV_NAME.match(str(key_env))),
                "key_env must be the NAME of an environment variable (letters, digits, _), not the key itself.",
            )
        require(bool(str(response_field).strip()), "response_field must not be empty.")
        self.url, self.format, self.model = url, format, model
        self.key_env, self.key_header, self.key_prefix, self.headers = key_env, key_header, key_prefix, headers
        self.response_field, self.extra_body = response_field, dict(extra_body or {})
        self.max_n_per_request, self.http = max_n_per_request, http
        self._client: Optional[ApiClient] = None
        self.shortfall = self.truncated = 0
        if key_env is not None:  # the key is known now: it must not be in any option either
            self.check_no_key(os.environ.get(str(key_env), "").strip())

    def check_no_key(self, key: Optional[str]) -> None:
        """Refuse the key's value (read from ``key_env``) in any option of this comparator."""
        options = dict(url=self.url, model=self.model, headers=self.headers, extra_body=self.extra_body)
        options.update(response_field=self.response_field, key_header=self.key_header, key_prefix=self.key_prefix)
        check_no_key(options, key, str(self.key_env))

    def check_saved_options(self, options: Mapping[str, Any]) -> None:
        """Refuse the key's value anywhere in what the run saves (hyperparameters: ``hparams.yaml``,
        checkpoints, W&B), e.g. a special token in the team's options; named, never shown."""
        if self.key_env is not None:
            check_no_key(options, os.environ.get(str(self.key_env), "").strip(), str(self.key_env))

    @property
    def client(self) -> ApiClient:
        """The HTTP client (made on first use, so the comparator itself stays a plain config object)."""
        if self._client is None:
            http = self.http
            self._client = ApiClient(
                self.url,
                http.timeout,
                self.headers,
                self.key_env,
                self.key_header,
                self.key_prefix,
                anthropic=self.format == "anthropic",
                max_retries=http.max_retries,
                concurrency=http.concurrency,
                backoff_base=self.backoff_base,
                retry_after_cap=self.retry_after_cap,
                deadline=http.deadline,
                max_response_bytes=http.max_response_bytes,
            )
        return self._client

    def start_round(self, round_index: int) -> None:
        # Before the current side samples (minutes, on big models): a missing key fails now.
        self.check_no_key(self.client.check_key())
        self.client.stats.requests = self.client.stats.retries = 0
        self.shortfall = self.truncated = 0

    def metrics(self) -> Dict[str, float]:
        return {
            "comparator/api_shortfall": float(self.shortfall),
            "comparator/api_requests": float(self.client.stats.requests),
            "comparator/api_retries": float(self.client.stats.retries),
            "comparator/api_truncated": float(self.truncated),
        }

    def __repr__(self) -> str:
        return f"ApiComparator(url={shown_url(self.url)!r}, format={self.format!r}, model={self.model!r})"

    # ------------------------------------------------------------------------------------------

    def texts_for(self, jobs: Sequence[ApiJob], count: int, settings: GenerationSettings) -> List[List[str]]:
        """Up to ``count`` completion texts for each job, in request order.

        All requests of all jobs run concurrently (at most ``concurrency`` at once).
        """
        got: List[List[str]] = [[] for _ in jobs]

        def bodies_for(k: int, remaining: int) -> List[dict]:
            prompt, agent, item = jobs[k]
            if self.format == "openai":
                sizes = openai_batch_sizes(remaining, self.max_n_per_request, self.url, self.model, count)
            elif self.format == "generic":
                sizes = [remaining]
            else:
                sizes = [1] * remaining
            return [
                request_body(self.format, prompt, agent, item, n, settings, self.model, self.extra_body) for n in sizes
            ]

        plan = [(k, body) for k in range(len(jobs)) for body in bodies_for(k, count)]
        while plan:
            payloads = self.client.post_all([body for _, body in plan])
            progressed = set()
            for (k, _), payload in zip(plan, payloads):
                try:
                    texts = parse_response(self.format, payload, self.response_field)
                except (ValueError, TypeError, RecursionError) as error:  # every malformed answer, named
                    raise ComparatorApiError(f"Comparator API at {shown_url(self.url)}: {error}") from None
                got[k].extend(redact_stored(text) for text in texts)  # an echoed key is never stored
                progressed.update([k] if texts else [])
            # Some OpenAI-compatible servers return fewer choices than n: ask again for the rest, but
            # only while the job's last pass returned something, so a server that returns nothing
            # (or always too little) cannot keep us looping.
            top_up = self.format == "openai"
            plan = [
                (k, body)
                for k in sorted(progressed)
                if top_up and len(got[k]) < count
                for body in bodies_for(k, count - len(got[k]))
            ]
        return [texts[:count] for texts in got]

    def sample(
        self,
        items: Sequence[Dict[str, Any]],
        prompts: Sequence[Sequence[str]],
        num_candidates: int,
        settings: GenerationSettings,
    ) -> List[List[List[Completion]]]:
        team = self.context.actors()
        num_agents = team.num_agents
        jobs = [ApiJob(prompts[k][agent], agent, items[k]) for agent in range(num_agents) for k in range(len(items))]
        texts = self.texts_for(jobs, num_candidates, settings)
        per_agent = [texts[agent * len(items) : (agent + 1) * len(items)] for agent in range(num_agents)]
        usable = [min(len(per_agent[a][k]) for a in range(num_agents)) for k in range(len(items))]
        self.shortfall += sum(num_agents * (num_candidates - m) for m in usable)
        if items and not any(usable):
            raise ComparatorApiError(
                f"Comparator API ({self.format} format) returned no usable completions this round "
                f"({self.client.stats.requests} requests): every item has an agent without any. Check "
                "the comparator's format, response_field and the provider's answers."
            )
        encoded = [
            [
                [encode(team, agent, text, settings.max_new_tokens) for text in per_agent[agent][k][: usable[k]]]
                for k in range(len(items))
            ]
            for agent in range(num_agents)
        ]
        self.truncated += sum(cut for per_agent in encoded for per_item in per_agent for _, cut in per_item)
        return [[[completion for completion, _ in per_item] for per_item in per_agent] for per_agent in encoded]

    def sample_texts(
        self, prompts: Sequence[str], items: Sequence[Dict[str, Any]], count: int, settings: GenerationSettings
    ) -> List[List[str]]:
        """A centralized source: ``count`` joint texts per prompt, sent as the context's single agent."""
        agent = self.context.agent_indices[0]
        return self.texts_for([ApiJob(p, agent, item) for p, item in zip(prompts, items)], count, settings)


def encode(team: Team, agent: int, text: str, max_tokens: Optional[int] = None) -> Tuple[Completion, bool]:
    """A completion from text, and whether it was cut: ids from the actor's tokenizer, no special
    tokens (as round-file records).

    A text longer than ``max_tokens`` tokens (a provider that ignored ``max_tokens``) is cut to that
    budget on arrival, text and ids alike, so it cannot overrun the model's context later.
    """
    tokenizer = team.tokenizers[agent]
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if max_tokens is None or len(ids) <= max_tokens:
        return Completion(ids=ids, text=text), False
    ids = ids[:max_tokens]
    return Completion(ids=ids, text=tokenizer.decode(ids, skip_special_tokens=True)), True
