"""What the tests do to a broker that the CLI and the demo never do: freeze it (SIGSTOP of the
local process, `docker pause` of the container) and resume it. `TestBroker` is the wheel's
`Broker` (connectors/local/broker_handle.py) with that control and the Testcontainers container
that runs it; an external cluster cannot be frozen (`supports("freeze")` is False there).
"""

from __future__ import annotations

import dataclasses
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from connectors.local.broker_handle import Broker


class FreezeUnsupported(RuntimeError):
    """The broker runs where this machine cannot stop it (an external cluster)."""


@dataclass
class TestBroker(Broker):
    """A broker the tests may freeze."""

    __test__ = False  # not a pytest test class

    #: The Testcontainers container running the broker (freeze() pauses it), else None.
    container: Any = field(default=None, repr=False)
    frozen: bool = field(default=False, init=False)

    @classmethod
    def of(cls, broker: Broker) -> TestBroker:
        """The tests' view of a broker the wheel started (the embedded one, a local node)."""
        if isinstance(broker, TestBroker):
            return broker
        return cls(**{f.name: getattr(broker, f.name) for f in dataclasses.fields(Broker)})

    def supports(self, feature: str) -> bool:
        if feature == "freeze":
            return self.process_id() is not None or self.container is not None
        return super().supports(feature)

    def freeze(self) -> None:
        """Make the broker stop answering, connections left open: SIGSTOP of the local process,
        `docker pause` (cgroup freezer) of the container. Raises FreezeUnsupported for an
        external cluster."""
        if self.process_id() is not None:
            os.kill(self.process_id(), signal.SIGSTOP)
        elif self.container is not None:
            self.container.get_wrapped_container().pause()
        else:
            raise FreezeUnsupported(
                f"the {self.kind} broker at {self.bootstrap_servers} runs outside this machine's "
                "control: it cannot be frozen (supports('freeze') is False)"
            )
        self.frozen = True

    def resume(self) -> None:
        """Undo freeze()."""
        if self.process_id() is not None:
            os.kill(self.process_id(), signal.SIGCONT)
        elif self.container is not None:
            self.container.get_wrapped_container().unpause()
        else:
            raise FreezeUnsupported(f"the {self.kind} broker cannot be frozen, nor resumed")
        self.frozen = False
