"""The campaign engine (see `facade`), split into one module per job."""

from oncall.engine.facade import CampaignEngine
from oncall.engine.parts import (
    CampaignError,
    Decider,
    EngineConfig,
    EngineDeps,
    EngineSettings,
)

__all__ = [
    "CampaignEngine",
    "CampaignError",
    "Decider",
    "EngineConfig",
    "EngineDeps",
    "EngineSettings",
]
