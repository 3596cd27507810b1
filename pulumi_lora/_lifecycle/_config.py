"""The provider's configuration: the ``pulumi-lora:*`` stack config keys and timeouts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from pulumi_lora._errors import (
    ConfigurationError,
)
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._settings import ClientTimeouts

#: How long a staged directory no CR names stays after its last staging, reuse or release
#: (``pulumi-lora:stagingGraceSeconds``): a replacement, or another stack staging the same
#: content meanwhile, finds it there.
STAGING_GRACE_SECONDS = 600.0


@dataclass(frozen=True)
class ProviderConfig:
    """Provider-wide settings from Pulumi config (``pulumi-lora:*``), plaintext in memory only.

    ``kube`` (``pulumi-lora:kubeconfig``, content or path, and ``:context``) is where the
    credentials of resources that set neither come from (``KubeSource.for_resource``);
    ``api_key`` is the SGLang API key when no Secret reference is given.
    """

    kube: KubeSource = field(default_factory=KubeSource)
    api_key: str | None = None
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    image: str | None = None  # the project's image, for the stager's Job (``_stage.DEFAULT_IMAGE``)
    staging_grace: float = STAGING_GRACE_SECONDS
    """Seconds a staged directory no CR names stays on its claim after its last use
    (``pulumi-lora:stagingGraceSeconds``; docs/staging.md, "Revisions and cleanup")."""

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
        grace = values.get("pulumi-lora:stagingGraceSeconds")  # 0 is a value: removal at once
        return cls(
            KubeSource(get("kubeconfig"), get("context")),
            get("sglangApiKey"),
            ClientTimeouts(**seconds),
            get("image"),
            STAGING_GRACE_SECONDS
            if grace is None or grace == ""
            else _seconds("pulumi-lora:stagingGraceSeconds", grace, zero=True),
        )

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        """Take a config as a stack's state holds it, pickled with the provider by the version
        that last wrote it: 0.3.0 and earlier kept ``kubeconfig`` and ``context`` apart, and a
        field newer than the pickle takes its default."""
        values = dict(state)
        if "kube" not in values:
            values["kube"] = KubeSource(values.pop("kubeconfig", None), values.pop("context", None))
        for known in fields(self):
            if known.name not in values and known.default_factory is not MISSING:
                values[known.name] = known.default_factory()
            elif known.name not in values:
                values[known.name] = known.default
        self.__dict__.update(values)

    def __repr__(self) -> str:
        return (
            f"ProviderConfig(kube={self.kube!r}, api_key={'set' if self.api_key else None}, "
            f"timeouts={self.timeouts!r}, image={self.image!r}, "
            f"staging_grace={self.staging_grace!r})"
        )


#: Stack config keys of the SGLang client timeouts, and the ``ClientTimeouts`` field each sets.
TIMEOUT_KEYS = {
    "connectTimeoutSeconds": "connect",
    "readTimeoutSeconds": "read",
    "loadTimeoutSeconds": "load",
    "unloadTimeoutSeconds": "unload",
    "smokeTimeoutSeconds": "smoke",
}
#: Every stack config key the provider reads.
CONFIG_KEYS = (
    "kubeconfig",
    "context",
    "sglangApiKey",
    "image",
    "stagingGraceSeconds",
    *TIMEOUT_KEYS,
)


def _positive_seconds(key: str, text: str) -> float:
    """``text`` as a positive, finite number of seconds, else a ``ConfigurationError``."""
    return _seconds(key, text)


def _seconds(key: str, text: str, *, zero: bool = False) -> float:
    """``text`` as a finite number of seconds, positive (or 0 with ``zero``), else a
    ``ConfigurationError`` naming ``key``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0))):
        what = "0 or a positive" if zero else "a positive"
        raise ConfigurationError(f"{key} must be {what} number of seconds, got {text!r}")
    return value
