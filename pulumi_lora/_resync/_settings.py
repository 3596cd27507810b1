"""The re-sync loop's settings, grouped by concern, with the unit and the reason under each field.

``_commands._resync`` fills them from flags; ``pulumi_lora.deploy`` renders the same defaults.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from pulumi_lora._kube._source import KubeSource
from pulumi_lora._resync._served import AdapterMetrics
from pulumi_lora._settings import ClientTimeouts

#: Field manager of everything the loop writes (status through server-side apply, the Lease).
FIELD_MANAGER = "pulumi-lora-resync"
#: Default Lease name; one Lease per installation of the loop.
DEFAULT_LEASE_NAME = "pulumi-lora-resync"
#: Default port of ``/healthz``, ``/readyz`` and ``/metrics``.
DEFAULT_METRICS_PORT = 9464
#: Default Lease timing in seconds (see :class:`LeaseSettings`): the renew deadline outlasts an
#: apiserver restart, the duration adds two election rounds of margin.
DEFAULT_LEASE_DURATION = 40.0
DEFAULT_RENEW_DEADLINE = 30.0
#: The in-cluster service account's namespace file (the Lease's default namespace).
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_identity() -> str:
    """``<pod name or hostname>-<pid>-<6 hex>``: readable in ``kubectl get lease``, and unique
    per process: in a container the pid is the same after every restart (often 1), and a
    restarted leader must not mistake its predecessor's Lease for its own."""
    name = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{name}-{os.getpid()}-{secrets.token_hex(3)}"


def default_lease_namespace() -> str:
    """``$POD_NAMESPACE`` (downward API), else the service account's namespace, else default."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(_SA_NAMESPACE, encoding="utf-8") as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Leader election through a ``coordination.k8s.io/v1`` Lease (client-go's algorithm)."""

    name: str = DEFAULT_LEASE_NAME
    """The Lease's name; replicas of one installation share it."""
    namespace: str = "default"
    """The Lease's namespace (the loop's own, in a cluster)."""
    identity: str = field(default_factory=default_identity)
    """This replica's ``holderIdentity``."""
    duration: float = DEFAULT_LEASE_DURATION
    """Seconds a standby waits after the Lease last changed before taking it over. Bounds the
    failover time after a leader dies without releasing (a clean shutdown releases at once).
    ``renew_deadline`` plus two rounds, so the leader has stopped well before a takeover."""
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    """Seconds the leader keeps acting without a successful renewal; then it stops. Long enough
    to ride out an apiserver restart (kube-apiserver drains ~13 s after SIGTERM, then starts:
    ~17 s without an answer on the testbed) instead of dropping its caches and starting over;
    client-go's 10 s does not. Shorter than ``duration``."""
    retry_period: float = 2.0
    """Seconds between two election rounds (renewals, or attempts to acquire)."""


@dataclass(frozen=True, slots=True)
class ResyncSettings:
    """Everything one run of the loop needs."""

    kube: KubeSource = field(default_factory=KubeSource)
    """Cluster credentials: kubeconfig/context, else KUBECONFIG, else the in-cluster account."""
    namespace: str | None = None
    """Watch one namespace only (pods, InferenceServices and CRs); None watches all of them."""
    verify_interval: float = 30.0
    """Seconds between two verification sweeps (``/v1/models`` on every Ready pod). Events do
    the fast work; the sweep only catches out-of-band changes, so 30 s costs little."""
    concurrency: int = 64
    """Pods worked on at the same time (each pod still gets one operation at a time: SGLang
    serializes its own loads, so more per pod would only queue there)."""
    backoff_base: float = 1.0
    """Seconds of the first retry delay after a failed pod run (doubling per failure)."""
    backoff_cap: float = 300.0
    """Longest retry delay in seconds, so a pod that recovers is healed within 5 minutes."""
    shutdown_timeout: float = 20.0
    """Seconds SIGTERM waits for in-flight loads and status writes before cancelling them
    (below Kubernetes' default 30 s grace period, so the Lease is still released cleanly)."""
    metrics_host: str = "0.0.0.0"  # noqa: S104 - probes and Prometheus reach the pod IP
    """Address of the health and metrics server."""
    metrics_port: int = DEFAULT_METRICS_PORT
    """Port of ``/healthz``, ``/readyz`` and ``/metrics`` (0 picks a free one, logged)."""
    secret_ttl: float = 60.0
    """Seconds an API key read from a Secret is reused; a 401 drops it at once."""
    status_concurrency: int = 8
    """Status writes in flight at once (1,000 CRs re-written after a restart stay smooth)."""
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    """SGLang client timeouts (short connect, long load and unload)."""
    lease: LeaseSettings = field(default_factory=LeaseSettings)
    """Leader election."""
    release_llmkube_finalizer: bool = False
    """Remove LLMKube's LoRA finalizer from the CRs the loop serves, once each: set where the
    coexistence policy holds LLMKube's controller off them (``resync_manifests`` does), so CRs it
    marked before the policy are taken over. Without the policy LLMKube would add it back."""
    adapter_metrics: AdapterMetrics = AdapterMetrics.PER_POD
    """Detail of the state metrics: one series per adapter and Ready pod (adapters x pods:
    20,000 for 1,000 adapters on 20 pods), or per adapter only for fleets larger than that."""
