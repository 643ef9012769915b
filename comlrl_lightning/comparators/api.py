"""The API comparator (``comparator_policy="api"``): a remote model answers the agents' prompts.

For every agent and task item the comparator asks the endpoint for ``K'`` completions of that
agent's prompt, in the wire format of ``comparator_api_format`` (see :mod:`.api_formats`), through
the retrying, concurrent :class:`~.api_client.ApiClient`. The texts get token ids from each
actor's tokenizer (the remote model's tokens are unknown).

A provider may return fewer completions than asked (an empty ``choices`` list, a filtered answer,
a server that ignores ``n``). What came back is used; because joint responses pair candidate ``j``
of every agent, all agents of an item are cut to the smallest count, and the candidates lost are
reported as ``comparator/api_shortfall``. Only a round without a single usable candidate is an
error. Any failed request raises before the round file is written, so the last checkpoint
resumes into a clean redo of the round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from ..options import at_least, positive, require
from ..rng import RandomStream
from ..team import Completion, GenerationSettings, Team
from .api_client import ApiClient, ComparatorApiError
from .api_formats import normalise_api_format, openai_batch_sizes, parse_response, request_body
from .local import Comparator

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key")


@dataclass
class ApiOptions:
    """The ``comparator_api_*`` options, validated (never a key: only the name of its variable)."""

    url: Optional[str] = None
    format: str = "generic"
    model: Optional[str] = None
    max_n_per_request: Optional[int] = None
    timeout: float = 120.0
    headers: Dict[str, str] = field(default_factory=dict)
    key_env: Optional[str] = None
    key_header: str = "Authorization"
    key_prefix: str = "Bearer"
    response_field: str = "completions"
    extra_body: Dict[str, Any] = field(default_factory=dict)
    concurrency: int = 8
    max_retries: int = 4
    backoff_base: float = 1.0
    """Seconds before the first retry (doubled each time, jittered); not a config option."""
    retry_after_cap: float = 60.0
    """Longest ``Retry-After`` honoured, in seconds; not a config option."""

    def client(self) -> ApiClient:
        assert self.url, "validated: the api policy requires comparator_api_url"
        return ApiClient(
            self.url, self.timeout, self.headers, self.key_env, self.key_header, self.key_prefix,
            anthropic=self.format == "anthropic", max_retries=self.max_retries, concurrency=self.concurrency,
            backoff_base=self.backoff_base, retry_after_cap=self.retry_after_cap,
        )


def validate_api_options(**options: Any) -> ApiOptions:
    """Check the ``comparator_api_*`` options (keyword names without the prefix); returns them normalised.

    The format is checked here, at parse time (the reference silently treated an unknown format
    as generic). Credentials may only come from the environment: a key-looking header or a
    ``key_env`` that is not a variable name is refused, because the config (with every option)
    is written to ``config.yaml``, ``hparams.yaml`` and each checkpoint.
    """
    api = ApiOptions(**{k: v for k, v in options.items() if v is not None})
    api.format = normalise_api_format(api.format)
    at_least("comparator_api_max_n_per_request", api.max_n_per_request, 1, allow_none=True)
    positive("comparator_api_timeout", api.timeout)
    at_least("comparator_api_concurrency", api.concurrency, 1)
    at_least("comparator_api_max_retries", api.max_retries, 0)
    require(isinstance(api.headers, dict) and all(isinstance(v, str) for v in api.headers.values()),
            "comparator_api_headers must map header names to strings.")
    for name in api.headers:
        require(
            str(name).lower() not in _CREDENTIAL_HEADERS and str(name).lower() != api.key_header.lower(),
            f"comparator_api_headers must not carry the credential ({name}): the config is saved to config.yaml, "
            "hparams and checkpoints. Put the key in an environment variable and name it in comparator_api_key_env.",
        )
    if api.key_env is not None:
        # Never echo the value: it may be a key pasted into the wrong option.
        require(bool(_ENV_NAME.match(str(api.key_env))),
                "comparator_api_key_env must be the NAME of an environment variable (letters, digits, _), "
                "not the key itself.")
    require(isinstance(api.extra_body, dict), "comparator_api_extra_body must be a mapping.")
    require(bool(str(api.response_field).strip()), "comparator_api_response_field must not be empty.")
    return api


class ApiJob(NamedTuple):
    """One prompt to ask the endpoint about."""

    prompt: str
    agent_index: int
    item: Dict[str, Any]


class ApiComparator(Comparator):
    """``api``: ``K'`` completions of every agent's prompt from a remote endpoint.

    Args:
        team_of_actors: the actors (their tokenizers give the completions' token ids).
        stream: the comparator stream (unused by remote sampling; kept for the common state).
        options: validated :class:`ApiOptions`.
    """

    def __init__(self, team_of_actors: Callable[[], Team], stream: RandomStream, options: ApiOptions) -> None:
        super().__init__(team_of_actors, stream)
        self.options = options
        self.client = options.client()
        self.shortfall = 0

    def start_round(self, round_index: int) -> None:
        # Before the current side samples (minutes, on big models): a missing key fails now.
        self.client.check_key()
        self.client.stats.requests = self.client.stats.retries = 0
        self.shortfall = 0

    def metrics(self) -> Dict[str, float]:
        return {
            "comparator/api_shortfall": float(self.shortfall),
            "comparator/api_requests": float(self.client.stats.requests),
            "comparator/api_retries": float(self.client.stats.retries),
        }

    # ------------------------------------------------------------------------------------------

    def texts_for(self, jobs: Sequence[ApiJob], count: int, settings: GenerationSettings) -> List[List[str]]:
        """Up to ``count`` completion texts for each job, in request order.

        All requests of all jobs run concurrently (at most ``comparator_api_concurrency`` at once).
        """
        options = self.options
        got: List[List[str]] = [[] for _ in jobs]

        def bodies_for(k: int, remaining: int) -> List[dict]:
            prompt, agent, item = jobs[k]
            if options.format == "openai":
                sizes = openai_batch_sizes(remaining, options.max_n_per_request, options.url, options.model, count)
            elif options.format == "generic":
                sizes = [remaining]
            else:
                sizes = [1] * remaining
            return [request_body(options.format, prompt, agent, item, n, settings, options.model, options.extra_body)
                    for n in sizes]

        plan = [(k, body) for k in range(len(jobs)) for body in bodies_for(k, count)]
        while plan:
            payloads = self.client.post_all([body for _, body in plan])
            progressed = set()
            for (k, _), payload in zip(plan, payloads):
                try:
                    texts = parse_response(options.format, payload, options.response_field)
                except ValueError as error:
                    raise ComparatorApiError(str(error)) from None
                got[k].extend(texts)
                progressed.update([k] if texts else [])
            # Some OpenAI-compatible servers return fewer choices than n: ask again for the rest, but
            # only while the job's last pass returned something, so a server that returns nothing
            # (or always too little) cannot keep us looping.
            top_up = options.format == "openai"
            plan = [(k, body) for k in sorted(progressed) if top_up and len(got[k]) < count
                    for body in bodies_for(k, count - len(got[k]))]
        return [texts[:count] for texts in got]

    def sample(
        self,
        items: Sequence[Dict[str, Any]],
        prompts: Sequence[Sequence[str]],
        num_candidates: int,
        settings: GenerationSettings,
    ) -> List[List[List[Completion]]]:
        team = self._actors()
        num_agents = team.num_agents
        jobs = [ApiJob(prompts[k][agent], agent, items[k]) for agent in range(num_agents) for k in range(len(items))]
        texts = self.texts_for(jobs, num_candidates, settings)
        per_agent = [texts[agent * len(items) : (agent + 1) * len(items)] for agent in range(num_agents)]
        usable = [min(len(per_agent[a][k]) for a in range(num_agents)) for k in range(len(items))]
        self.shortfall += sum(num_agents * (num_candidates - m) for m in usable)
        if items and not any(usable):
            raise ComparatorApiError(
                f"Comparator API ({self.options.format} format) returned no usable completions this round "
                f"({self.client.stats.requests} requests): every item has an agent without any. Check "
                "comparator_api_format, comparator_api_response_field and the provider's answers."
            )
        return [
            [[encode(team, agent, text) for text in per_agent[agent][k][: usable[k]]] for k in range(len(items))]
            for agent in range(num_agents)
        ]


def encode(team: Team, agent: int, text: str) -> Completion:
    """A completion from text: ids from the actor's tokenizer, no special tokens (as round-file records)."""
    return Completion(ids=list(team.tokenizers[agent](text, add_special_tokens=False)["input_ids"]), text=text)

