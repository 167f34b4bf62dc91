"""The `raven-bot` command line's arguments, every command's: kept apart from the commands,
which import the runtime, so that parsing (and `--help`, `version`) imports nothing heavy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

# A string: argparse's action class is generic to type checkers only.
_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_CAMPAIGN_RUN_HELP = """\
Run one campaign in the foreground until it reaches a final state, then print its record.

The command runs in the current directory (or --workdir), sandboxed: that directory is its
working directory and the only place it may write, so `--run "python train.py"` runs the
train.py found there. Its output and exit code are kept under RAVEN_HOME/campaigns/<id>/.

Decisions are made by the model when RAVEN_MODEL has its key (one call per wake-up, none
while the campaign waits; the policy when a call fails), else by the offline rule-based
policy (continue while improving within budget, stop on divergence or budget, resubmit a
crash once). Notices go to stderr, one line each; the record goes to stdout (--json adds
the model calls measured while the campaign waited). Exit code 0 when the campaign closed,
1 when it failed or was cancelled, 2 for invalid arguments, 130 after Ctrl-C (the round is
terminated and the campaign cancelled).
"""

_PICTURE_OUT = "where to write it: FILE.png or FILE.svg (an existing directory)"


def parser() -> argparse.ArgumentParser:
    """The whole `raven-bot` command line."""
    parser = argparse.ArgumentParser(
        prog="raven-bot",
        description="A Slack/Discord bot hosting a multi-agent Host. Configure with .env.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser(
        "run",
        help="start every configured channel (console when no Slack/Discord tokens)",
        description="Serve Slack and/or Discord when their tokens are set, else the console.",
    )
    sub.add_parser(
        "chat",
        help="chat in the terminal (console adapter only)",
        description="Each input line is a message; works with piped stdin and exits at EOF.",
    )
    sub.add_parser(
        "doctor",
        help="print the effective configuration and check every dependency",
        description="Exit code 1 when a required check fails; offline mode is a warning.",
    )
    sub.add_parser("version", help="print the version", description="Print the version.")
    graph = sub.add_parser(
        "graph", help="graph tools", description="Check a graph submission file offline."
    )
    graph_sub = graph.add_subparsers(dest="graph_command", metavar="ACTION", required=True)
    validate = graph_sub.add_parser(
        "validate",
        help="run admission on a graph JSON file",
        description="Prints `admitted` and exits 0, or the first admission error and exits 2.",
    )
    validate.add_argument("file", type=Path, help="graph submission JSON")
    validate.add_argument(
        "--agents", type=Path, default=None, help="agents.toml (default: RAVEN_HOME/agents.toml)"
    )
    runs = sub.add_parser("runs", help="graph run records", description="Read run records.")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    runs_sub.add_parser("list", help="recent runs", description="List recent runs, newest first.")
    show = runs_sub.add_parser("show", help="one run's report", description="Show one run.")
    show.add_argument("run", help="run id (from `raven-bot runs list`)")
    picture = runs_sub.add_parser(
        "graph",
        help="draw one run's graph as a picture",
        description="Draw the run's nodes (coloured by state, labelled with id and agent) and "
        "their dependencies, left to right, as PNG or SVG (by the file's suffix).",
    )
    picture.add_argument("run", help="run id (from `raven-bot runs list`)")
    picture.add_argument("--out", type=Path, required=True, metavar="FILE", help=_PICTURE_OUT)
    _add_campaigns(sub)
    _add_schedules(sub)
    _add_memory(sub)
    _add_eval(sub)
    _add_evolve(sub)
    _add_skills(sub)
    _add_mcp(sub)
    _add_usage(sub)
    _add_web(sub)
    return parser


def _add_campaigns(sub: _Commands) -> None:
    """The `campaigns` subcommand and its actions, on `raven-bot`'s subparsers."""
    campaigns = sub.add_parser(
        "campaigns",
        help="oncall campaign records, stop, and headless runs",
        description="Read campaign records, stop a campaign, or run one headless.",
    )
    actions = campaigns.add_subparsers(dest="campaigns_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="recent campaigns", description="List campaigns, newest first."
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    show = actions.add_parser(
        "show",
        help="one campaign's full record",
        description="Spec, state, baseline, rounds, wake-ups, decisions, measurements, report.",
    )
    show.add_argument("campaign", help="campaign id (from `raven-bot campaigns list`)")
    show.add_argument("--json", action="store_true", help="print JSON")
    stop = actions.add_parser(
        "stop",
        help="cancel a campaign (terminates its running round)",
        description="Cancel a campaign and terminate its round; works while a bot runs it.",
    )
    stop.add_argument("campaign", help="campaign id (from `raven-bot campaigns list`)")
    chart = actions.add_parser(
        "chart",
        help="draw a campaign's metric over its rounds",
        description="Draw the metric's values by round, the best so far, failed rounds and "
        "the baseline, as a 1200 x 600 PNG or an SVG (by the file's suffix).",
    )
    chart.add_argument("campaign", help="campaign id (from `raven-bot campaigns list`)")
    chart.add_argument("--out", type=Path, required=True, metavar="FILE", help=_PICTURE_OUT)
    _add_run_parser(actions)


def _add_schedules(sub: _Commands) -> None:
    """The `schedules` subcommand and its actions, on `raven-bot`'s subparsers."""
    schedules = sub.add_parser(
        "schedules",
        help="scheduled tasks: list, show, pause, resume, delete, run now",
        description="Read and act on scheduled tasks (a running bot applies changes within "
        "seconds).",
    )
    actions = schedules.add_subparsers(dest="schedules_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="scheduled tasks", description="Tasks that may still fire, newest first."
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--all", action="store_true", help="include ended and cancelled tasks")
    show = actions.add_parser(
        "show", help="one task and its firings", description="A task, its schedule and firings."
    )
    show.add_argument("task", help="task id (from `raven-bot schedules list`)")
    show.add_argument("--json", action="store_true", help="print JSON")
    for name, does in (
        ("pause", "stop firing until resumed"),
        ("resume", "fire again from now on"),
        ("delete", "cancel the task"),
        ("run", "fire once now (its schedule is unchanged)"),
    ):
        act = actions.add_parser(name, help=does, description=f"{does[0].upper()}{does[1:]}.")
        act.add_argument("task", help="task id (from `raven-bot schedules list`)")


def _add_run_parser(actions: _Commands) -> None:
    run = actions.add_parser(
        "run",
        help="run one campaign in the foreground (model or rule-based decisions)",
        description=_CAMPAIGN_RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--goal", required=True, help="what the campaign is for")
    run.add_argument("--machine", default="local", help="a machine from machines.toml")
    run.add_argument("--run", required=True, metavar="CMD", help="the command one round runs")
    run.add_argument("--metric", required=True, metavar="NAME:min|max", help="e.g. loss:min")
    run.add_argument("--pattern", metavar="REGEX", help="regex with one group around the value")
    run.add_argument("--budget", required=True, metavar="DURATION", help="wall clock, e.g. 2h")
    run.add_argument("--wake-every", metavar="DURATION", help="scheduled wake-ups (default 5m)")
    run.add_argument("--poll", metavar="DURATION", help="how often output is read (default 5s)")
    run.add_argument("--stall", metavar="DURATION", help="no output this long = stalled (10m)")
    run.add_argument("--rounds", metavar="N", help="at most this many rounds (default 5)")
    run.add_argument("--baseline", metavar="X", help="the starting metric value")
    run.add_argument("--margin", metavar="X", help="worse than the baseline by this = diverged")
    run.add_argument(
        "--json-key", metavar="KEY", help="read the metric from JSON lines (a.b for nested)"
    )
    run.add_argument("--partition", metavar="NAME", help="Slurm: the partition to submit to")
    run.add_argument("--cpus", metavar="N", help="cpus per round (Slurm: --cpus-per-task)")
    run.add_argument("--time", metavar="DURATION", help="time limit of one round, e.g. 30m")
    run.add_argument(
        "--workdir",
        metavar="DIR",
        help="where the command runs, writable (default: the current directory; on an ssh "
        "machine its `workdir` unless given)",
    )
    run.add_argument("--json", action="store_true", help="print the final record as JSON")


def _add_memory(sub: _Commands) -> None:
    """The `memory` subcommand and its actions."""
    memory = sub.add_parser(
        "memory", help="per-user memory", description="Read and change one user's memory."
    )
    actions = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)
    user_help = (
        "the user: an owner key `user:PLATFORM:WORKSPACE:ID`, or an id known to memory "
        "(e.g. U012AB3CD)"
    )
    add = actions.add_parser(
        "add", help="store a note", description="Store a note, as `remember` would."
    )
    add.add_argument("--user", required=True, help=user_help)
    # Several words are one note: `memory add --user U1 deep learning notes` works unquoted.
    add.add_argument("text", nargs="+", help="what to remember (the rest of the line)")
    search = actions.add_parser("search", help="ranked recall", description="Recall for a query.")
    search.add_argument("--user", required=True, help=user_help)
    search.add_argument("--json", action="store_true", help="a JSON list of results")
    search.add_argument("--dm", action="store_true", help="include what was said in DMs")
    search.add_argument("query", nargs="+", help="what to look for (the rest of the line)")
    show = actions.add_parser("show", help="everything remembered", description="Show records.")
    show.add_argument("--user", required=True, help=user_help)
    forget = actions.add_parser("forget", help="delete all", description="Delete all records.")
    forget.add_argument("--user", required=True, help=user_help)
    actions.add_parser("reindex", help="rebuild the index", description="Rebuild from SQLite.")


def _add_eval(sub: _Commands) -> None:
    """The `eval` subcommand: plan with the Host (MAOB) and score prediction files."""
    evaluate = sub.add_parser(
        "eval",
        help="measure the Host's planning (MAOB)",
        description=(
            "Score the Host's plans against reference graphs at the level of four domains "
            '(research, coding, content, oncall). Task lines: {"id", "request", '
            '"reference": GRAPH, "accepted": [GRAPH, ...]}; prediction lines: {"id", '
            '"nodes", "edges"}; GRAPH = {"nodes": [{"id", "domain"}], "edges": '
            "[[src, dst], ...]}."
        ),
    )
    actions = evaluate.add_subparsers(dest="eval_command", metavar="ACTION", required=True)
    tasks_help = "task file (JSON Lines; default: the stand-in set shipped with raven-bot)"
    plans = actions.add_parser(
        "plans",
        help="one Host turn per task; graphs captured, nothing dispatched",
        description=(
            "Give the Host each request with the standard delegation instruction, capture the "
            "graph it submits without running it, and score it. Needs a model "
            "(RAVEN_MODEL with its key: ANTHROPIC_API_KEY, or OPENAI_API_KEY or a server URL "
            "for an openai: model)."
        ),
    )
    plans.add_argument("--tasks", type=Path, default=None, help=tasks_help)
    plans.add_argument("--attempts", type=int, default=1, help="turns per task (default 1)")
    plans.add_argument(
        "--domain",
        action="append",
        default=[],
        metavar="AGENT=DOMAIN",
        help="map an agent to a domain (default: research, code=coding, design=content, oncall)",
    )
    plans.add_argument(
        "--predictions", type=Path, default=None, help="also write the prediction lines here"
    )
    plans.add_argument("--json", action="store_true", help="print the report as JSON")
    score = actions.add_parser(
        "score",
        help="score a prediction file",
        description="Score prediction lines (a repeated id is another attempt).",
    )
    score.add_argument("predictions", type=Path, help="prediction file (JSON Lines)")
    score.add_argument("--tasks", type=Path, default=None, help=tasks_help)
    score.add_argument("--json", action="store_true", help="print the report as JSON")


def _add_evolve(sub: _Commands) -> None:
    """`evolve AGENT` and `harness ACTION`: evolving a specialist's harness and its versions."""
    evolve = sub.add_parser(
        "evolve",
        help="improve a specialist's harness from scored tasks",
        description=(
            "Evolve AGENT's harness (prompt, knowledge notes, runtime and config values; never "
            'the loop, tools, sandbox or evaluator) on a task file: JSON Lines of {"id", '
            '"prompt", "verify": {"exact"|"regex"|"command"|"judge": ...}, '
            '"split": "train"|"test"}. The winner is stored as a new harness version, '
            "active only once promoted. The same command again continues an interrupted run."
        ),
    )
    evolve.add_argument("agent", help="an in-process specialist (research, code, design, oncall)")
    evolve.add_argument("--tasks", type=Path, required=True, help="task file (JSON Lines)")
    for flag, default, does in (
        ("--rounds", 5, "rounds R"),
        ("--candidates", 4, "proposals per round J"),
        ("--subset", None, "screening tasks per round n (2 or more; 4 or every training task)"),
        ("--keep", 2, "screening survivors confirmed per round N_keep"),
        ("--patience", 2, "rounds without a change before stopping P"),
        ("--attempts", 3, "attempts per task K"),
    ):
        shown = f" (default {default})" if default is not None else ""
        evolve.add_argument(flag, type=int, default=default, help=does + shown)
    evolve.add_argument("--json", action="store_true", help="print the result as JSON")
    harness = sub.add_parser(
        "harness",
        help="harness versions of the specialists",
        description="List, compare, promote and roll back evolved harness versions.",
    )
    actions = harness.add_subparsers(dest="harness_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every version", description="List versions.")
    listing.add_argument("agent", nargs="?", default=None, help="only this agent's")
    show = actions.add_parser(
        "show", help="one version", description="Show one version (0: the built-in harness)."
    )
    show.add_argument("agent")
    show.add_argument("version", type=int, help="a version from `harness list`, or 0")
    compare = actions.add_parser(
        "diff", help="compare two versions", description="Diff two versions (0: built-in)."
    )
    compare.add_argument("agent")
    compare.add_argument("old", type=int)
    compare.add_argument("new", type=int)
    promote = actions.add_parser(
        "promote", help="make a version active", description="Make a version active."
    )
    promote.add_argument("agent")
    promote.add_argument("version", type=int)
    rollback = actions.add_parser(
        "rollback", help="undo the last promotion", description="Return to the replaced version."
    )
    rollback.add_argument("agent")


def _add_skills(sub: _Commands) -> None:
    """The `skills` subcommand and its actions."""
    skills = sub.add_parser(
        "skills", help="Skill Forge", description="List skills, or rank them for a query."
    )
    actions = skills.add_subparsers(dest="skills_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every skill", description="Every loaded skill.")
    listing.add_argument("--json", action="store_true", help="a JSON list")
    search = actions.add_parser(
        "search", help="fused ranking", description="The fused ranking before the gate."
    )
    search.add_argument("--json", action="store_true", help="a JSON list")
    # `skills search svg chart from csv` works unquoted, as `memory search` does.
    search.add_argument(
        "query", nargs="+", help="the request to find skills for (the rest of the line)"
    )


def _add_mcp(sub: _Commands) -> None:
    """The `mcp` subcommand: the team's tool servers of RAVEN_HOME/mcp.json."""
    mcp = sub.add_parser(
        "mcp",
        help="MCP tool servers: state and tools",
        description="Connect to the tool servers of RAVEN_HOME/mcp.json (each within its own "
        "timeout) and say what they offer, or why they did not start.",
    )
    actions = mcp.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="every server: transport, state, tools, initialize time, last error",
        description="Every server of mcp.json, connected at once. Exit code 0, or 2 when "
        "mcp.json is wrong.",
    )
    listing.add_argument("--json", action="store_true", help="a JSON list")
    tools = actions.add_parser(
        "tools",
        help="one server's tools as agents see them",
        description="The server's tools after its include/exclude filter, named as agents "
        "call them (mcp__SERVER__TOOL). Exit code 1 when the server does not start, 2 for an "
        "unknown server or a wrong mcp.json.",
    )
    tools.add_argument("server", help="a server name from mcp.json (`raven-bot mcp list`)")
    tools.add_argument("--json", action="store_true", help="a JSON list")


# Kept here, not imported from the usage ledger: parsing imports nothing heavy.
_GROUPINGS = ("person", "channel", "model", "day", "role", "conversation")


def _add_usage(sub: _Commands) -> None:
    """The `usage` subcommand: what model calls used and cost."""
    usage = sub.add_parser(
        "usage",
        help="model calls, tokens and cost, by person, channel, model or day",
        description="Totals of the model calls recorded in RAVEN_HOME/raven.db: calls, tokens "
        "in and out, cache reads and writes, and cost at the prices of each call (`unpriced` "
        "for a model without a price), grouped, with the total.",
    )
    usage.add_argument(
        "--by",
        choices=_GROUPINGS,
        default="day",
        help="group by this (default: day, the team's day by RAVEN_TIMEZONE)",
    )
    usage.add_argument(
        "--since",
        metavar="WHEN",
        default=None,
        help="only calls from then on: 7d, 24h, a date (2026-12-01) or a date and time "
        "(2026-12-01T09:30)",
    )
    usage.add_argument("--json", action="store_true", help="a JSON list, one object a group")


def _add_web(sub: _Commands) -> None:
    """The `web` subcommand: the read-only viewer alone, and a link for the operator."""
    web = sub.add_parser(
        "web",
        help="serve the read-only web viewer of runs, campaigns and schedules",
        description="Serve the viewer (as the bot does with RAVEN_WEB_PORT) until Ctrl-C, "
        "or print a signed link to one run or campaign. Pages open only through links.",
    )
    web.add_argument(
        "--port", type=_port, default=None, help="listen on this port (default: RAVEN_WEB_PORT)"
    )
    actions = web.add_subparsers(dest="web_command", metavar="ACTION")
    link = actions.add_parser(
        "link",
        help="print a signed link to a run or a campaign",
        description="Print a link that opens the record's conversation's runs, campaigns and "
        "schedules for RAVEN_WEB_LINK_HOURS.",
    )
    link.add_argument("record", metavar="RUN|CAMPAIGN", help="a run id or a campaign id")


def _port(text: str) -> int:
    """A TCP port number (argparse's error names the option and this message)."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: write a number from 1 to 65535")
    return port
