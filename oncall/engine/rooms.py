"""The engine's rooms, built together on one shared core."""

from __future__ import annotations

from oncall.engine.admission import Admission
from oncall.engine.closing import Closing
from oncall.engine.core import EngineCore
from oncall.engine.decisions import Decisions
from oncall.engine.holding import Holding
from oncall.engine.monitoring import Monitor
from oncall.engine.operations import Operations
from oncall.engine.recovery import Recovery
from oncall.engine.rounds import Rounds
from oncall.engine.slots import Slots
from oncall.engine.status import StatusBoard
from oncall.engine.wakes import Wakes


class Rooms:
    """Each room reaches the others through this: a round's life crosses them all and comes
    back (a slot starts a round, its monitor wakes it, a decision ends it, which frees the
    slot for the next), so they are built together and looked up when called."""

    def __init__(self, core: EngineCore) -> None:
        self.admission = Admission(core, self)
        self.slots = Slots(core, self)
        self.rounds = Rounds(core, self)
        self.monitor = Monitor(core, self)
        self.status = StatusBoard(core, self)
        self.wakes = Wakes(core, self)
        self.decisions = Decisions(core, self)
        self.operations = Operations(core, self)
        self.closing = Closing(core, self)
        self.holding = Holding(core, self)
        self.recovery = Recovery(core, self)
