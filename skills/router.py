"""Task-aware skill retrieval and selection (paper §6.2, Eqs. 71–73).

Optional query rewriter, concurrent over-fetching from every source, weighted RRF fusion by
display name with a native-score representative, policy filtering without refill, an LLM
compatibility gate with its fallback (prompts and rendering: `skills.prompts`).

Without the gate (no model, `gate_enabled` off, or a failed gate call) a pool entry is selected
only with lexical evidence that it applies (`skills.evidence`), at most `k_sel` of them
(`k_fb` after a failed call): a fused rank alone is no reason to inject a skill.

One departure from the paper: a local (bundled or user) skill is never shadowed. Names are
compared by `skills.names.name_key` (case, spacing, punctuation and look-alike letters
ignored); a hub or experience skill named like any local skill is dropped before fusion, and
in a fused group a local hit is always the representative, whatever the native scores.

Hub skills fail closed: a hub entry without a readable safety verdict (`metadata.safety`, a
number from 0 to 1) is dropped before fusion too, unless `allow_unscored_hub` admits entries
with no verdict at all (one the bot cannot read is never admitted); each left-out entry is
reported with why (`Selection.left_out`, `SkillRouter.ranking`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from skills.evidence import evident
from skills.model import Skill, SkillCatalog, SkillHit, SkillSource
from skills.names import name_key
from skills.prompts import (
    GATE_SYSTEM,
    REWRITER_SYSTEM,
    excerpt,
    gate_prompt,
    render_selected,
    rewriter_prompt,
    shown_id,
)

log = logging.getLogger(__name__)


class Completer(Protocol):
    """One model call: a system prompt and a user message in, the model's text out."""

    async def complete(self, system: str, user: str) -> str:
        """The model's answer text (raises on transport or API failure)."""
        ...


def _default_weights() -> dict[str, float]:
    return {"local": 1.0, "memory": 0.9, "hub": 0.85}


@dataclass(frozen=True)
class RouterSettings:
    """Budgets, fusion weights and policy for one router (paper §6.2, Table 10 defaults)."""

    k_pool: int = 5
    k_sel: int = 2
    k_fb: int = 3
    c_rrf: float = 60.0
    weights: Mapping[str, float] = field(default_factory=_default_weights)
    over_fetch: int = 2
    gate_enabled: bool = True
    rewriter_enabled: bool = False
    blocked_names: frozenset[str] = frozenset()
    min_safety: float = 0.3
    allow_unscored_hub: bool = False  # hub entries without a safety verdict take part
    excerpt_chars: int = 600
    description_chars: int = 300
    source_timeout: float = 3.0

    def __post_init__(self) -> None:
        # A read-only copy: settings are shared between routers and must not drift.
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))
        for name in ("k_pool", "k_sel", "k_fb", "over_fetch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer")
        if not self.c_rrf > 0:
            raise ValueError("c_rrf must be positive")
        if any(w < 0 for w in self.weights.values()):
            raise ValueError("source weights must be non-negative")
        if self.source_timeout <= 0:
            raise ValueError("source_timeout must be positive")


@dataclass(frozen=True)
class FusedCandidate:
    """One display name after fusion: its RRF score (Eq. 71), the representative hit
    (Eq. 72) and the one-based ranks at which each source returned the name."""

    name: str
    score: float
    hit: SkillHit
    ranks: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True)
class LeftOut:
    """An entry the policy kept from the pool, and why (for the operator)."""

    hit: SkillHit
    reason: str

    @property
    def qid(self) -> str:
        """The entry's qualified id."""
        return self.hit.qid


@dataclass(frozen=True)
class Ranking:
    """`skills search`: every fused name, the entries left out (before fusion for want of
    a hub verdict, after it by policy) and the sources that failed."""

    fused: list[FusedCandidate]
    left_out: list[LeftOut]
    source_errors: dict[str, str]


@dataclass(frozen=True)
class Selection:
    """What the router decided for one request, with enough detail to explain it."""

    query: str
    candidates: list[FusedCandidate]  # Pool_0: the fused top k_pool, before filtering
    pool: list[SkillHit]  # Pool: after the policy filter, never refilled
    selected: list[SkillHit]  # S_sel (Eq. 73)
    skipped: bool = False  # the rewriter said no skill is needed
    gate_failed: bool = False  # the gate call or its parsing failed: k_fb fallback
    source_errors: dict[str, str] = field(default_factory=dict)
    plan: str = ""  # the gate's explanatory plan (not an executable graph)
    left_out: list[LeftOut] = field(default_factory=list)


# --- fusion (Eqs. 71-72) -------------------------------------------------------------------


@dataclass
class _Group:
    score: float
    hit: SkillHit
    ranks: dict[str, list[int]]


def _outranks(hit: SkillHit, current: SkillHit) -> bool:
    """Eq. 72 with local precedence: a local hit beats any other source; otherwise the
    strictly higher native score wins (a tie keeps the first encountered hit)."""
    hit_local, current_local = hit.source == "local", current.source == "local"
    if hit_local != current_local:
        return hit_local
    return hit.score > current.score


def rrf_fuse(
    lists: Sequence[tuple[str, float, Sequence[SkillHit]]], c: float
) -> list[FusedCandidate]:
    """Weighted reciprocal-rank fusion by display name (Eq. 71, names compared by
    `name_key`) with the max-native-score representative (Eq. 72), a local hit always
    preferred; `lists` is (source, weight, hits best first) in registered order."""
    if not c > 0:
        raise ValueError("c must be positive")
    # dict insertion order records first appearance (source order, then rank): the stable
    # sort below turns that into the tie order Eq. 72 prescribes.
    groups: dict[str, _Group] = {}
    for source, weight, hits in lists:
        for rank, hit in enumerate(hits, start=1):
            contribution = weight / (c + rank)
            key = name_key(hit.name)
            group = groups.get(key)
            if group is None:
                groups[key] = _Group(contribution, hit, {source: [rank]})
                continue
            group.score += contribution
            group.ranks.setdefault(source, []).append(rank)
            if _outranks(hit, group.hit):
                group.hit = hit
    ordered = sorted(groups.values(), key=lambda group: -group.score)
    return [
        FusedCandidate(
            name=group.hit.name,
            score=group.score,
            hit=group.hit,
            ranks={src: tuple(ranks) for src, ranks in group.ranks.items()},
        )
        for group in ordered
    ]


def drop_shadowing(hits: Sequence[SkillHit], local_keys: Collection[str]) -> list[SkillHit]:
    """`hits` without the non-local ones named like a local skill (by `name_key`)."""
    return [h for h in hits if h.source == "local" or name_key(h.name) not in local_keys]


# --- model answers -------------------------------------------------------------------------

_FENCED = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json(text: str, openers: str = "{") -> Any:
    """The JSON value in a model answer: the whole text, else a fenced block, else the first
    value starting at one of `openers`; raises ValueError when there is none."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    for block in _FENCED.findall(text):
        try:
            return json.loads(block)
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for pos, char in enumerate(text):
        if char in openers:
            try:
                return decoder.raw_decode(text, pos)[0]
            except ValueError:
                continue
    raise ValueError("no JSON value in the answer")


def parse_rewrite(text: str) -> tuple[bool, str] | None:
    """(need, query) from a rewriter answer; None when it is not a valid decision."""
    try:
        obj = extract_json(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    need = obj.get("need")
    raw = obj.get("query")
    query = raw.strip() if isinstance(raw, str) else ""
    if need is False:
        return False, query
    if need is True and query:
        return True, query
    return None  # need missing/not a boolean, or retrieval asked for without a query


def parse_gate(text: str) -> tuple[list[str], str]:
    """(selected ids in order, plan) from a gate answer; raises ValueError when malformed."""
    obj = extract_json(text)
    if not isinstance(obj, dict):
        raise ValueError("the gate answer is not a JSON object")
    selected = obj.get("selected")
    if not isinstance(selected, list):
        raise ValueError("the gate answer has no `selected` list")
    plan = obj.get("plan")
    # A non-string id cannot name a pool entry: it is ignored like an unknown id.
    return [i for i in selected if isinstance(i, str)], plan if isinstance(plan, str) else ""


# --- policy --------------------------------------------------------------------------------


def parse_number(value: object) -> float | None:
    """A number, or a numeric string, as a float; None for anything else (booleans too)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return None if math.isnan(number) else number


NO_HUB_VERDICT = (
    "no safety verdict from the hub; "
    "set RAVEN_SKILLS_HUB_ALLOW_UNSCORED=true to admit unscored hub skills"
)


def hub_verdict_problem(hit: SkillHit, settings: RouterSettings) -> str | None:
    """Why a hub entry may not take part for want of a usable safety verdict, or None (also
    for other sources: local skills are the operator's, experience skills the bot's own)."""
    if hit.source != "hub" and hit.skill.origin != "hub":
        return None
    if "safety" not in hit.skill.metadata:
        return None if settings.allow_unscored_hub else NO_HUB_VERDICT
    raw = hit.skill.metadata["safety"]
    safety = parse_number(raw)
    if safety is None or not 0.0 <= safety <= 1.0:
        # The hub said something, but not a score: admitting it would trust an unknown verdict.
        return f"unreadable safety verdict from the hub ({str(raw)[:40]!r})"
    return None


def left_out_reason(hit: SkillHit, settings: RouterSettings) -> str | None:
    """Runtime admission, None when admitted: not blocked (by qualified id, or by a name that
    reads alike: `name_key`), a hub entry with a usable verdict, safety not too low (a
    missing or malformed score rejects no local or experience skill)."""
    blocked_keys = {name_key(name) for name in settings.blocked_names}
    if hit.qid in settings.blocked_names or name_key(hit.name) in blocked_keys:
        return "blocked (RAVEN_SKILLS_BLOCKED)"
    problem = hub_verdict_problem(hit, settings)
    if problem is not None:
        return problem
    safety = parse_number(hit.skill.metadata.get("safety"))
    if safety is not None and safety < settings.min_safety:
        return f"safety {safety:g} below {settings.min_safety:g}"
    return None


def admitted(hit: SkillHit, settings: RouterSettings) -> bool:
    """Runtime admission (`left_out_reason` finds nothing against the hit)."""
    return left_out_reason(hit, settings) is None


def _verdicted(
    hits: list[SkillHit], settings: RouterSettings, left_out: list[LeftOut]
) -> list[SkillHit]:
    """The hits that may take part in fusion as far as hub verdicts go; the others are
    appended to `left_out` (fail closed: they never reach the gate or the Host)."""
    kept = []
    for hit in hits:
        problem = hub_verdict_problem(hit, settings)
        if problem is None:
            kept.append(hit)
        else:
            left_out.append(LeftOut(hit, problem))
    return kept


def _unshadowed(
    source: str, hits: list[SkillHit], local_keys: frozenset[str] | None, errors: dict[str, str]
) -> list[SkillHit]:
    """A source's hits that may take part in fusion: local ones all; another source's only
    those not named like a local skill, and none when the local names are unknown."""
    if source == "local":
        return hits
    if local_keys is None:
        if hits:
            errors[source] = "left out: the local skill names could not be listed"
        return []
    kept = drop_shadowing(hits, local_keys)
    if len(kept) < len(hits):
        names = sorted(
            {repr(h.name) for h in hits if h.source != "local"} - {repr(h.name) for h in kept}
        )
        log.info("%s skills named like local skills left out: %s", source, ", ".join(names))
    return kept


# --- the router ----------------------------------------------------------------------------


class SkillRouter:
    """Selects skills for a request from several sources (paper §6.2)."""

    def __init__(
        self,
        sources: Sequence[SkillSource],
        *,
        completer: Completer | None,
        settings: RouterSettings,
    ) -> None:
        self._sources = tuple(sources)
        self._completer = completer
        self._settings = settings

    async def select(
        self,
        request: str,
        *,
        tools: Sequence[str] = (),
        specialists: Sequence[str] = (),
        history: Sequence[str] = (),
    ) -> Selection:
        """Rewrite, retrieve, fuse, filter and gate: the skills to inject for `request`."""
        need, query = await self._rewrite(request, history)
        if not need:
            return Selection(query=query, candidates=[], pool=[], selected=[], skipped=True)
        fused, errors, local, left_out = await self._retrieve(query, history)
        candidates = fused[: self._settings.k_pool]
        # Filtering happens after Take_k_pool: a removed entry is not replaced (no refill).
        pool = []
        for candidate in candidates:
            reason = left_out_reason(candidate.hit, self._settings)
            if reason is None:
                pool.append(candidate.hit)
            else:
                left_out.append(LeftOut(candidate.hit, reason))
        if left_out:
            log.info("skills left out: %s", "; ".join(f"{e.qid}: {e.reason}" for e in left_out))
        selected, plan, failed = await self._gate(query, pool, tools, specialists, local)
        return Selection(
            query=query,
            candidates=candidates,
            pool=pool,
            selected=selected,
            gate_failed=failed,
            source_errors=errors,
            plan=plan,
            left_out=left_out,
        )

    async def search(self, query: str) -> list[FusedCandidate]:
        """Fusion only (no rewriter, filter or gate), every fused name."""
        ranking = await self.ranking(query)
        for source, error in ranking.source_errors.items():
            log.warning("skill source %s failed: %s", source, error)
        return ranking.fused

    async def ranking(self, query: str) -> Ranking:
        """Fusion without rewriter or gate, every fused name, and every entry left out
        (a fused one the policy filter would drop too): for `skills search`."""
        fused, errors, _, left_out = await self._retrieve(query, ())
        for candidate in fused:
            reason = left_out_reason(candidate.hit, self._settings)
            if reason is not None:
                left_out.append(LeftOut(candidate.hit, reason))
        return Ranking(fused, left_out, errors)

    def left_out_reason(self, hit: SkillHit) -> str | None:
        """Why this router's policy would leave `hit` out, or None (for `skills list`)."""
        return left_out_reason(hit, self._settings)

    async def _rewrite(self, request: str, history: Sequence[str]) -> tuple[bool, str]:
        if not self._settings.rewriter_enabled or self._completer is None:
            return True, request
        try:
            answer = await self._completer.complete(
                REWRITER_SYSTEM, rewriter_prompt(request, history)
            )
        except Exception as exc:  # a failing rewriter must never cost the request its skills
            log.warning(
                "skill query rewriter failed, using the request: %s", str(exc) or type(exc).__name__
            )
            return True, request
        decision = parse_rewrite(answer)
        if decision is None:
            log.warning("skill query rewriter answer unusable, using the request")
            return True, request
        need, query = decision
        return need, query or request

    async def _retrieve(
        self, query: str, history: Sequence[str]
    ) -> tuple[list[FusedCandidate], dict[str, str], list[Skill], list[LeftOut]]:
        """(fused candidates, source errors, every local skill: [] when not listable, the
        hub entries left out for want of a usable verdict)."""
        k = self._settings.over_fetch * self._settings.k_pool
        history = tuple(history)
        searches = asyncio.gather(
            *(self._query_one(source, query, k, history) for source in self._sources)
        )
        results, local = await asyncio.gather(searches, self._local_skills())
        local_keys = None if local is None else frozenset(name_key(s.name) for s in local)
        lists: list[tuple[str, float, Sequence[SkillHit]]] = []
        errors: dict[str, str] = {}
        left_out: list[LeftOut] = []
        for source, (hits, error) in zip(self._sources, results, strict=True):
            if error is not None:
                errors[source.name] = error
            kept = _unshadowed(source.name, hits, local_keys, errors)
            kept = _verdicted(kept, self._settings, left_out)
            lists.append((source.name, self._settings.weights.get(source.name, 1.0), kept))
        return rrf_fuse(lists, self._settings.c_rrf), errors, local or [], left_out

    async def _local_skills(self) -> list[Skill] | None:
        """Every local skill (retrieved or not), or None when a local catalog cannot be
        listed: then no other source may contribute (fail closed)."""
        catalogs = [s for s in self._sources if s.name == "local" and isinstance(s, SkillCatalog)]
        try:
            async with asyncio.timeout(self._settings.source_timeout):
                listed = await asyncio.gather(*(catalog.skills() for catalog in catalogs))
        except Exception as exc:
            log.warning("cannot list the local skills, leaving other sources out: %s", exc)
            return None
        return [skill for skills in listed for skill in skills]

    async def _query_one(
        self, source: SkillSource, query: str, k: int, history: Sequence[str]
    ) -> tuple[list[SkillHit], str | None]:
        """One source's hits (at most k), or [] and why it failed: a source never fails
        the selection."""
        timeout = self._settings.source_timeout
        try:
            async with asyncio.timeout(timeout):
                hits = await source.search(query, k, history)
        except TimeoutError:
            return [], f"timed out after {timeout:g}s"
        except Exception as exc:
            return [], f"{type(exc).__name__}: {exc}"
        return list(hits)[:k], None

    async def _gate(
        self,
        query: str,
        pool: list[SkillHit],
        tools: Sequence[str],
        specialists: Sequence[str],
        local: Sequence[Skill],
    ) -> tuple[list[SkillHit], str, bool]:
        """Eq. 73: (selected, plan, gate_failed); without a model's judgement, only the pool
        entries with lexical evidence (`local` weighs the words), at most k_sel / k_fb."""
        s = self._settings
        if not pool:  # every branch of Eq. 73 yields nothing: spare the model call
            return [], "", False
        if not s.gate_enabled or self._completer is None:
            return (await asyncio.to_thread(evident, query, pool, local))[: s.k_sel], "", False
        try:
            answer = await self._completer.complete(
                GATE_SYSTEM,
                gate_prompt(
                    query,
                    pool,
                    tools,
                    specialists,
                    description_chars=s.description_chars,
                    excerpt_chars=s.excerpt_chars,
                ),
            )
            ids, plan = parse_gate(answer)
        except Exception as exc:
            log.warning(
                "skill gate failed, falling back to the top %d: %s",
                s.k_fb,
                str(exc) or type(exc).__name__,  # never an empty reason
            )
            return (await asyncio.to_thread(evident, query, pool, local))[: s.k_fb], "", True
        # An id as shown in the prompt (one line, capped) names its hit as well as the real one.
        by_id = {**{shown_id(hit): hit for hit in pool}, **{hit.qid: hit for hit in pool}}
        # Lookup keeps order and repeats and drops ids outside the pool; then Take_k_sel.
        return [by_id[i] for i in ids if i in by_id][: s.k_sel], plan, False


__all__ = [
    "GATE_SYSTEM",
    "NO_HUB_VERDICT",
    "REWRITER_SYSTEM",
    "Completer",
    "FusedCandidate",
    "LeftOut",
    "Ranking",
    "RouterSettings",
    "Selection",
    "SkillRouter",
    "admitted",
    "drop_shadowing",
    "excerpt",
    "extract_json",
    "gate_prompt",
    "hub_verdict_problem",
    "left_out_reason",
    "parse_gate",
    "parse_number",
    "parse_rewrite",
    "render_selected",
    "rewriter_prompt",
    "rrf_fuse",
]
