"""Import contracts that `lint-imports` cannot express with module names alone.

A chat adapter is a package of `bot/` with an `adapter.py` (`bot/slack/`, `bot/discord/`,
`bot/console/`): the contract finds them by that file, so a new platform's folder is held to
the rule without an edit to pyproject.toml.
"""

from __future__ import annotations

from grimp import ImportGraph
from importlinter.contracts.independence import IndependenceContract
from importlinter.domain import fields
from importlinter.domain.contract import ContractCheck

ADAPTER_MODULE = "adapter"


class PackagesWithModuleIndependence(IndependenceContract):
    """The packages directly under `parent` that hold a module named `marker` are independent
    of each other (configured as `parent` and `marker` instead of a list of modules)."""

    type_name = "packages_with_module_independence"

    parent = fields.StringField()
    marker = fields.StringField(required=False)
    modules = fields.SetField(subfield=fields.ModuleExpressionField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        parent = str(self.parent)
        marker = str(self.marker or ADAPTER_MODULE)
        found = sorted(
            child for child in graph.find_children(parent) if f"{child}.{marker}" in graph.modules
        )
        if len(found) < 2:
            raise ValueError(f"{parent}: fewer than two packages with a `{marker}` module")
        self.modules = fields.SetField(subfield=fields.ModuleExpressionField()).parse(found)  # type: ignore[assignment]
        return super().check(graph, verbose)
