"""The provider's configuration: the ``pulumi-lora:*`` stack config keys and timeouts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pulumi_lora._errors import (
    ConfigurationError,
)
from pulumi_lora._settings import ClientTimeouts


@dataclass(frozen=True)
class ProviderConfig:
    """Provider-wide settings from Pulumi config (``pulumi-lora:*``), plaintext in memory only.

    ``kubeconfig`` (content or path) and ``context`` are defaults for resources that set neither;
    ``api_key`` is the SGLang API key when no Secret reference is given.
    """

    kubeconfig: str | None = None
    context: str | None = None
    api_key: str | None = None
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    image: str | None = None  # the project's image, for the stager's Job (``_stage.DEFAULT_IMAGE``)

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> ProviderConfig:
        """Read ``pulumi-lora:kubeconfig``, ``:context``, ``:sglangApiKey`` and the timeouts.

        Raises ``ConfigurationError`` naming the key when a timeout is not a positive number of
        seconds, so a typo fails the first operation instead of hanging a later one.
        """

        def get(key: str) -> str | None:
            return values.get(f"pulumi-lora:{key}") or None

        seconds: dict[str, float] = {}
        for key, attribute in TIMEOUT_KEYS.items():
            if (text := get(key)) is not None:
                seconds[attribute] = _positive_seconds(f"pulumi-lora:{key}", text)
        return cls(
            get("kubeconfig"),
            get("context"),
            get("sglangApiKey"),
            ClientTimeouts(**seconds),
            get("image"),
        )

    def __repr__(self) -> str:
        return (
            f"ProviderConfig(kubeconfig={'set' if self.kubeconfig else None}, "
            f"context={self.context!r}, api_key={'set' if self.api_key else None}, "
            f"timeouts={self.timeouts!r}, image={self.image!r})"
        )


#: Stack config keys of the SGLang client timeouts, and the ``ClientTimeouts`` field each sets.
TIMEOUT_KEYS = {
    "connectTimeoutSeconds": "connect",
    "readTimeoutSeconds": "read",
    "loadTimeoutSeconds": "load",
    "unloadTimeoutSeconds": "unload",
}
#: Every stack config key the provider reads.
CONFIG_KEYS = ("kubeconfig", "context", "sglangApiKey", "image", *TIMEOUT_KEYS)


def _positive_seconds(key: str, text: str) -> float:
    """``text`` as a positive, finite number of seconds, else a ``ConfigurationError``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{key} must be a positive number of seconds, got {text!r}")
    return value
