"""Settling one attempt: journal it, judge it, then commit completed, exception (the Host
decides) or failed — each only once the attempt's records are on disk."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.backends.base import AgentOutcome
from agents.registry import AgentEntry
from core.fence import fence, untrusted_preface
from host.graph.executor.commits import NodeBook
from host.graph.executor.deps import RunPolicy
from host.graph.executor.journal import RunWriter
from host.graph.judge import NOT_APPROVED, CompletionJudge, Verdict
from host.graph.model import NodeSpec
from host.graph.render import Artifact


@dataclass(frozen=True)
class Job:
    """One attempt of one node, prepared before it waits for a slot."""

    spec: NodeSpec
    entry: AgentEntry
    attempt: int
    prompt: str  # the task the agent receives
    request: str  # what this attempt asks for, as journaled and judged
    continuation: str | None  # sent alone to a stateful session that holds the last attempt


class Settler:
    """Judges finished attempts and commits what they became."""

    def __init__(
        self,
        book: NodeBook,
        writer: RunWriter,
        judge: CompletionJudge,
        policy: RunPolicy,
        *,
        suspended: Callable[[str], Awaitable[None]],
    ) -> None:
        self._book = book
        self._writer = writer
        self._judge = judge
        self._policy = policy
        # Told once a node is committed as an exception (manifest, report, announcement).
        self._suspended = suspended
        # Built once: `json.dumps` with options builds an encoder per call.
        self._encoder = json.JSONEncoder(default=str)

    async def settle(self, job: Job, outcome: AgentOutcome) -> None:
        """Journal the attempt, judge it, then commit completed / exception / failed."""
        node_id, attempt = job.spec.id, job.attempt
        # Journaled before the judge reads them (synced with the next batch).
        self._writer.answer(node_id, attempt, outcome)
        verdict = await self._verdict(job.request, outcome)
        record = self._book.nodes[node_id]
        accounting: dict[str, Any] = {
            "model_calls": record.model_calls + outcome.model_calls,
            "input_tokens": record.input_tokens + outcome.usage.input_tokens,
            "output_tokens": record.output_tokens + outcome.usage.output_tokens,
            "judge_calls": record.judge_calls + verdict.calls,
            "judge_tokens": record.judge_tokens + verdict.tokens,
            "seconds": record.seconds + outcome.seconds,
            "verdict": verdict.as_dict(),
            "continuation": None,
            # The attempt whose answer is recorded says which model gave it.
            "fallback": outcome.fallback,
        }
        if verdict.accomplished:
            await self._complete(job, outcome, verdict, accounting)
            return
        problem = outcome.error or (
            outcome.output[:300]
            if outcome.offline
            else f"{verdict.category}: {verdict.missing}".strip(": ")
        )
        # The attempt's records are on disk before its outcome is committed and announced.
        with contextlib.suppress(OSError):
            await self._writer.sync()
        policy = self._policy
        if attempt < record.max_attempts and policy.host_reachable and not outcome.offline:
            await self._book.commit(
                node_id,
                "exception",
                output_path=None,
                error=problem,
                deadline=policy.clock() + policy.decision_seconds,
                **accounting,
            )
            await self._suspended(node_id)
            return
        await self._book.commit(
            node_id,
            "failed",
            output_path=None,
            error=problem,
            finished_at=policy.clock(),
            **accounting,
        )

    async def _verdict(self, prompt: str, outcome: AgentOutcome) -> Verdict:
        if outcome.not_approved:
            # Nothing ran: there is nothing to judge, and reports say "not approved".
            return Verdict(
                accomplished=False,
                category=NOT_APPROVED,
                missing="the command's approval",
                evidence=(outcome.error or "")[:500],
            )
        if outcome.offline:
            return Verdict(
                accomplished=False,
                category="missing_credential",
                missing="a language model (RAVEN_MODEL's key: ANTHROPIC_API_KEY or OPENAI_API_KEY)",
                evidence=outcome.output[:500],
            )
        encode = self._encoder.encode
        transcript = "\n".join(encode(t) for t in outcome.transcript)
        return await self._judge.judge(
            prompt=prompt,
            output=outcome.output,
            transcript=transcript,
            error=outcome.error,
            truncated=outcome.truncated,
        )

    async def _complete(
        self, job: Job, outcome: AgentOutcome, verdict: Verdict, accounting: dict[str, Any]
    ) -> None:
        node_id = job.spec.id
        output_path = self._writer.output_path(node_id)
        # The output is journaled (synced with the commit) before SQLite points at its file.
        self._writer.output(output_path, outcome.output)
        memory = memory_record(job.spec, outcome, verdict, output_path, self._writer.marker())
        self._writer.memory(node_id, job.attempt, memory)
        try:
            # The journal is synced in the commit's batch, before SQLite points at the output.
            await self._book.commit(
                node_id,
                "completed",
                artifact=Artifact(node_id, outcome.output, output_path),
                output_path=output_path,
                error=None,
                finished_at=self._policy.clock(),
                synced=True,
                **accounting,
            )
        except OSError as exc:
            # Nothing of that batch was committed: SQLite points at no unwritten output.
            await self._book.fail(
                node_id, f"internal error: the records could not be written: {exc}"
            )


def memory_record(
    spec: NodeSpec, outcome: AgentOutcome, verdict: Verdict, output_path: Path, marker: str
) -> str:
    """A completed node's memory record (paper Eq. 32): what it did, where its output is,
    the judge's evidence and an excerpt (both fenced: they quote the agent)."""
    excerpt = f"node {spec.id} output"
    return (
        f"# Memory record of node `{spec.id}` ({spec.agent})\n\n"
        f"Task summary: {spec.summary or spec.template[:200]}\n\n"
        f"Verdict: accomplished.\n\n"
        f"Output: {output_path}\n\n"
        f"{untrusted_preface(marker)}\n\n"
        f"Judge's evidence:\n{fence(verdict.evidence[:300], source='judge', marker=marker)}"
        f"\n\nExcerpt:\n{fence(outcome.output[:1500], source=excerpt, marker=marker)}\n"
    )
