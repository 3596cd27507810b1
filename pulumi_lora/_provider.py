"""The Pulumi dynamic provider: the class the engine runs, and the only part programs load.

Programs pickle it by reference (its import path is a stable API), so it imports nothing heavy;
the work (``_pulumi._calls``) loads at the first call.
"""

from __future__ import annotations

import gc
from functools import cache
from typing import TYPE_CHECKING, Any

from pulumi.dynamic import (
    CheckResult,
    ConfigureRequest,
    CreateResult,
    DiffResult,
    ReadResult,
    ResourceProvider,
    UpdateResult,
)

from pulumi_lora._pulumi import _host_messages

if TYPE_CHECKING:
    from pulumi_lora._lifecycle import ProviderConfig
    from pulumi_lora._pulumi import _calls as calls

_host_messages.install()  # in the dynamic-provider host: our errors read as messages


@cache
def _calls() -> calls.Calls:
    """The calls' implementation, imported at the first call (see the module docstring).

    Every command's first answer waits for this import, so it runs with the cyclic garbage
    collector paused: what it allocates lives as long as the process, and the collections the
    allocations would trigger were ~15% of it. In the engine's provider process (which serves
    one command and exits), ``gc.freeze`` then keeps those objects out of the collections the
    calls trigger later."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        from pulumi_lora._pulumi._calls import (  # noqa: PLC0415 - the program never needs it
            CALLS,
            serves_one_command,
        )
    finally:
        if was_enabled:
            gc.enable()
    if serves_one_command():
        gc.freeze()
    return CALLS


class LoRAAdapterProvider(ResourceProvider):
    """Dynamic provider for one LLMKube LoRAAdapter CR and its adapter on every Ready pod."""

    def __init__(self) -> None:
        super().__init__()
        # Nothing secret is pickled into state: credentials arrive through configure().
        self.serialize_as_secret_always = False
        self._config: ProviderConfig | None = None

    @property
    def config(self) -> ProviderConfig:
        """The stack config ``configure`` gave (the defaults before it)."""
        if self._config is None:
            self._config = _calls().default_config()
        return self._config

    def configure(self, req: ConfigureRequest) -> None:
        """Take the credentials and the SGLang timeouts (``CONFIG_KEYS``) from stack config."""
        self._config = _calls().configured(req.config)

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        """Validate every input; unknown (preview) values are checked once known."""
        return _calls().check(self.config, olds, news)

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        """Explicit diff against the live values in the old outputs."""
        return _calls().diff(self.config, id_, olds, news)

    def create(self, props: dict[str, Any]) -> CreateResult:
        """Apply the CR and load everywhere (nothing left behind on failure)."""
        return _calls().create(self.config, props)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """Refresh (or import): the CR's live spec and every Ready pod's truth."""
        return _calls().read(self.config, id_, props)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        """Swap on every pod, re-write status, return the full outputs."""
        return _calls().update(self.config, id_, olds, news)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Unload everywhere, remove the CR, wait until it is gone."""
        _calls().delete(self.config, id_, props)
