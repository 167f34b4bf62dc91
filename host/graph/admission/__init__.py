"""Admission: check a graph submission in five ordered groups before anything is dispatched.

Groups run in the order of the paper's Table 1 (format, structure, capability, status,
environment) and validation stops at the first failure, whose message names the node and
field, states the repair when one is known, and points to the orchestration guide. A repair
that changes the graph's wiring is also given as `Edit`s (`apply_edits` makes them), and is
chosen so that admission accepts the result: never a dependency that would close a cycle.

Rooms: `grammar` (placeholders), `checks/` (one module per group), `messages` (pydantic
errors in the graph's words), `errors` (the rejection and how it is told), `paths`,
`result`, `repairs`, and `pipeline` (`admit`).
"""

from host.graph.admission.checks.format import RESERVED_NODE_IDS
from host.graph.admission.errors import (
    GUIDE_PATH,
    GUIDE_POINTER,
    USER_GUIDE_POINTER,
    AdmissionError,
    AdmissionGroup,
    ApprovalRequired,
    Edit,
    EditAction,
)
from host.graph.admission.grammar import (
    PATH_KINDS,
    PLACEHOLDER_FORMS,
    Placeholder,
    PlaceholderKind,
    PlaceholderSyntaxError,
    parse_placeholders,
)
from host.graph.admission.paths import confine_path
from host.graph.admission.pipeline import admit
from host.graph.admission.repairs import apply_edits
from host.graph.admission.result import AdmittedGraph

__all__ = [
    "GUIDE_PATH",
    "GUIDE_POINTER",
    "PATH_KINDS",
    "PLACEHOLDER_FORMS",
    "RESERVED_NODE_IDS",
    "USER_GUIDE_POINTER",
    "AdmissionError",
    "AdmissionGroup",
    "AdmittedGraph",
    "ApprovalRequired",
    "Edit",
    "EditAction",
    "Placeholder",
    "PlaceholderKind",
    "PlaceholderSyntaxError",
    "admit",
    "apply_edits",
    "confine_path",
    "parse_placeholders",
]
