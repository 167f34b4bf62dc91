"""Which model a role talks to: `RAVEN_MODEL`'s forms parsed, and the provider built from one.

Accepted forms: `<model>` (Anthropic, as before), `anthropic:<model>`, `openai:<model>`, and
either prefixed form followed by `@<base URL>` (an OpenAI-compatible local server, a proxy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args
from urllib.parse import urlsplit

from agents.models.offline import OfflineProvider
from agents.models.provider import ModelProvider

ProviderKind = Literal["anthropic", "openai"]
PROVIDER_KINDS: Final[tuple[str, ...]] = get_args(ProviderKind)

ACCEPTED_FORMS: Final = (
    "accepted forms: <model> (Anthropic), anthropic:<model>, openai:<model>, "
    "openai:<model>@<base URL> (e.g. openai:qwen2.5-coder@http://127.0.0.1:8080/v1)"
)

# A local server needs no key, but the SDK sends one: this stands in for it.
NO_KEY_PLACEHOLDER: Final = "no-key"


class ModelSpecError(ValueError):
    """A model entry in none of the accepted forms; the message names the forms."""


@dataclass(frozen=True)
class ModelSpec:
    """One model entry: the API it speaks, the model's name, and where (None: the default)."""

    provider: ProviderKind
    model: str
    base_url: str | None = None

    @property
    def label(self) -> str:
        """`provider:model`, as providers name themselves (no URL: it may hold credentials)."""
        return f"{self.provider}:{self.model}"


@dataclass(frozen=True)
class ProviderOptions:
    """What building a provider needs from the settings: keys, default URLs, limits."""

    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    timeout: float = 120.0
    max_retries: int = 4
    # Replies received as a stream: `timeout` then bounds the silence between tokens, not the
    # whole answer (a slow local model still writing is not cut off).
    stream: bool = False


def parse_model_spec(text: str) -> ModelSpec:
    """Parse one model entry; `ModelSpecError` naming the accepted forms if it is malformed."""
    entry = text.strip()
    if not entry or any(c.isspace() for c in entry):
        raise ModelSpecError(f"must be one model with no spaces; {ACCEPTED_FORMS}")
    prefix, colon, rest = entry.partition(":")
    if not colon:  # unprefixed: today's meaning, an Anthropic model
        if "@" in entry and "://" in entry:
            raise ModelSpecError(f"a base URL needs a provider prefix; {ACCEPTED_FORMS}")
        return ModelSpec("anthropic", entry)
    if prefix not in PROVIDER_KINDS:
        raise ModelSpecError(
            f"unknown provider {prefix!r} (known: {', '.join(PROVIDER_KINDS)}); {ACCEPTED_FORMS}"
        )
    model, base_url = _split_url(rest)
    if not model:
        raise ModelSpecError(f"the model name after {prefix}: is empty; {ACCEPTED_FORMS}")
    kind: ProviderKind = "anthropic" if prefix == "anthropic" else "openai"
    return ModelSpec(kind, model, base_url)


def _split_url(rest: str) -> tuple[str, str | None]:
    """`model@http(s)://…` into its name and URL; an `@` not before a URL is part of the name."""
    for scheme in ("@http://", "@https://"):
        at = rest.find(scheme)
        if at >= 0:
            url = rest[at + 1 :]
            if not urlsplit(url).hostname:
                raise ModelSpecError(f"the base URL has no host; {ACCEPTED_FORMS}")
            return rest[:at], url
    if "@" in rest and "://" in rest:
        raise ModelSpecError(f"the base URL must start with http:// or https://; {ACCEPTED_FORMS}")
    return rest, None


def has_credentials(spec: ModelSpec, options: ProviderOptions) -> bool:
    """Whether this model can be called: a key for its API, or (OpenAI-compatible) a server
    URL of its own, since a local server often wants no key."""
    if spec.provider == "anthropic":
        return bool(options.anthropic_api_key)
    return bool(options.openai_api_key or spec.base_url or options.openai_base_url)


def build_model_provider(spec: ModelSpec, options: ProviderOptions) -> ModelProvider:
    """The provider for this model, or the honest offline one when it has no credentials."""
    if not has_credentials(spec, options):
        # It names the key this model needs (an openai: model's is not Anthropic's).
        return OfflineProvider(api=spec.provider, model=spec.label)
    if spec.provider == "anthropic":
        from agents.models.anthropic_provider import AnthropicProvider

        assert options.anthropic_api_key is not None
        return AnthropicProvider(
            api_key=options.anthropic_api_key,
            model=spec.model,
            base_url=spec.base_url or options.anthropic_base_url,
            timeout=options.timeout,
            max_retries=options.max_retries,
            stream=options.stream,
        )
    from agents.models.openai_provider import OpenAIProvider

    return OpenAIProvider(
        api_key=options.openai_api_key or NO_KEY_PLACEHOLDER,
        model=spec.model,
        base_url=spec.base_url or options.openai_base_url,
        timeout=options.timeout,
        max_retries=options.max_retries,
        stream=options.stream,
    )
