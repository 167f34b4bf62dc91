"""An optional remote skill hub (HTTP, off unless a URL is configured): search returns
skills as JSON; a short timeout keeps a slow hub from delaying a turn, and a failing hub
contributes nothing (the router isolates sources)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skills.model import Skill, SkillHit, SourceName

DEFAULT_TIMEOUT_SECONDS = 2.0
MAX_BODY_CHARS = 20_000


class HubSkill(BaseModel):
    """One skill as the hub sends it (validated: the hub is another party)."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=200)
    name: str = Field(min_length=1, max_length=64)
    description: str = Field(min_length=1, max_length=1024)
    body: str = Field(default="", max_length=MAX_BODY_CHARS)
    score: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)


class HubError(RuntimeError):
    """The hub answered something unusable (status, JSON shape)."""


class HubSource:
    """`GET {url}/search?q=…&k=…` → `{"skills": [{id, name, description, body, score}]}`."""

    def __init__(
        self, url: str, *, token: str | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        self._url = url.rstrip("/")
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    @property
    def name(self) -> SourceName:
        """The hub source."""
        return "hub"

    async def search(self, query: str, k: int, history: Sequence[str] = ()) -> list[SkillHit]:
        """Up to k hub skills for `query`, best first (the hub's order and scores)."""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        params = {"q": query[:1000], "k": str(k)}
        async with (
            aiohttp.ClientSession(timeout=self._timeout) as session,
            session.get(f"{self._url}/search", params=params, headers=headers) as resp,
        ):
            if resp.status != 200:
                raise HubError(f"the skill hub answered HTTP {resp.status}")
            payload = await resp.json(content_type=None)
        items = payload.get("skills") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            raise HubError("the skill hub's answer has no `skills` list")
        hits = []
        for item in items[:k]:
            try:
                skill = HubSkill.model_validate(item)
            except ValidationError:
                continue  # one bad entry does not spoil the rest
            hits.append(
                SkillHit(
                    "hub",
                    Skill(
                        id=skill.id,
                        name=skill.name,
                        description=skill.description,
                        body=skill.body,
                        metadata=skill.metadata,
                        origin="hub",
                    ),
                    skill.score,
                )
            )
        return hits
