"""``pulumi-lora resync``: the re-sync loop as a click command (:data:`resync_command`).

Mounted on the main CLI by ``_commands._main``.
"""

from __future__ import annotations

import asyncio

import click

from pulumi_lora._commands._options import COMMAND_SETTINGS, kube_source
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._resync._served import AdapterMetrics
from pulumi_lora._resync._settings import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_LEASE_NAME,
    DEFAULT_METRICS_PORT,
    DEFAULT_RENEW_DEADLINE,
    LeaseSettings,
    ResyncSettings,
    default_identity,
    default_lease_namespace,
)
from pulumi_lora._settings import ClientTimeouts

__all__ = ["resync_command"]

METRICS_MISSING = (
    "pulumi-lora resync needs prometheus-client for its /metrics: "
    "pip install 'pulumi-lora[metrics]'"
)
"""What ``resync`` says when the ``metrics`` extra is not installed (instead of a traceback)."""

_SECONDS = click.FloatRange(min=0.05)
_DEFAULTS = ClientTimeouts()


@click.command(
    "resync",
    context_settings={**COMMAND_SETTINGS, "show_default": True},
)
@kube_source(checked=False)
@click.option("--namespace", "-n", help="Watch this namespace only (default: all namespaces).")
@click.option(
    "--verify-interval",
    type=_SECONDS,
    default=30.0,
    help="Seconds between verification sweeps of every Ready pod's /v1/models.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=64,
    help="Pods worked on at once (always one operation per pod).",
)
@click.option(
    "--backoff-base",
    type=_SECONDS,
    default=1.0,
    help="First retry delay (s) after a failed pod run; doubles per failure, with jitter.",
)
@click.option("--backoff-max", type=_SECONDS, default=300.0, help="Longest retry delay (s).")
@click.option(
    "--connect-timeout",
    type=_SECONDS,
    default=_DEFAULTS.connect,
    help="Seconds to open a connection to a pod's SGLang server.",
)
@click.option(
    "--read-timeout",
    type=_SECONDS,
    default=_DEFAULTS.read,
    help="Seconds to wait for /v1/models and /health answers.",
)
@click.option(
    "--load-timeout",
    type=_SECONDS,
    default=_DEFAULTS.load,
    help="Seconds to wait for one /load_lora_adapter answer (weights from the Hub take minutes).",
)
@click.option(
    "--unload-timeout",
    type=_SECONDS,
    default=_DEFAULTS.unload,
    help="Seconds to wait for one /unload_lora_adapter answer (it waits for in-flight requests).",
)
@click.option(
    "--smoke-timeout",
    type=_SECONDS,
    default=_DEFAULTS.smoke,
    help="Seconds to wait for the one-token /generate through an adapter after each load.",
)
@click.option(
    "--lease-name",
    default=DEFAULT_LEASE_NAME,
    help="Name of the coordination.k8s.io Lease replicas elect a leader with.",
)
@click.option(
    "--lease-namespace",
    default=None,
    help="Namespace of the Lease  [default: $POD_NAMESPACE, the service account's, or default]",
)
@click.option(
    "--lease-duration",
    type=_SECONDS,
    default=DEFAULT_LEASE_DURATION,
    help="Seconds a standby waits on an unchanged Lease before taking over.",
)
@click.option(
    "--lease-renew-deadline",
    type=_SECONDS,
    default=DEFAULT_RENEW_DEADLINE,
    help="Seconds the leader acts without renewing, then stops.",
)
@click.option(
    "--lease-retry-period", type=_SECONDS, default=2.0, help="Seconds between election rounds."
)
@click.option(
    "--identity",
    default=None,
    help="This replica's Lease holder identity  "
    "[default: $POD_NAME or hostname, the pid and a random suffix]",
)
@click.option(
    "--metrics-host",
    default="0.0.0.0",  # noqa: S104 - probes and Prometheus reach the pod IP
    help="Address of /healthz, /readyz and /metrics.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_METRICS_PORT,
    help="Port of /healthz, /readyz and /metrics (0 picks one; see the 'serving' log line).",
)
@click.option(
    "--shutdown-timeout",
    type=_SECONDS,
    default=20.0,
    help="Seconds SIGTERM waits for in-flight loads and status writes.",
)
@click.option(
    "--release-llmkube-finalizer",
    is_flag=True,
    help=(
        "Remove LLMKube's LoRA finalizer from the CRs the loop serves (once each). Only where "
        "pulumi-lora's coexistence policy is applied: it keeps LLMKube from adding it back."
    ),
)
@click.option(
    "--adapter-metrics",
    type=click.Choice([m.value for m in AdapterMetrics]),
    default=AdapterMetrics.PER_POD.value,
    help=(
        "Detail of the state metrics: a series per adapter and Ready pod (naming the pod), or "
        "per adapter only, for fleets where adapters x pods is too many series."
    ),
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    help="Log level (JSON lines on stderr).",
)
def resync_command(
    *,
    kube: KubeSource,
    namespace: str | None,
    verify_interval: float,
    concurrency: int,
    backoff_base: float,
    backoff_max: float,
    connect_timeout: float,
    read_timeout: float,
    load_timeout: float,
    unload_timeout: float,
    smoke_timeout: float,
    lease_name: str,
    lease_namespace: str | None,
    lease_duration: float,
    lease_renew_deadline: float,
    lease_retry_period: float,
    identity: str | None,
    metrics_host: str,
    metrics_port: int,
    shutdown_timeout: float,
    release_llmkube_finalizer: bool,
    adapter_metrics: str,
    log_level: str,
) -> None:
    """Keep every LoRAAdapter loaded on every Ready pod of its InferenceService.

    Watches pods, InferenceServices and LoRAAdapters; re-loads a pod's adapters the moment it
    is new, restarted or Ready again; verifies /v1/models periodically; writes each CR's status;
    serves the delegated transport. Replicas elect one leader through a Lease.
    """
    from pulumi_lora._resync import _logs as logs  # noqa: PLC0415 - keep --help light

    try:
        from pulumi_lora._resync._app import serve  # noqa: PLC0415
    except ModuleNotFoundError as exc:  # the one optional dependency of the loop
        if exc.name != "prometheus_client":
            raise
        raise click.ClickException(METRICS_MISSING) from None

    if lease_renew_deadline >= lease_duration:
        raise click.BadParameter(
            "must be shorter than --lease-duration, so a leader stops before anyone takes over",
            param_hint="--lease-renew-deadline",
        )
    logs.configure(log_level)
    settings = ResyncSettings(
        kube=kube,
        namespace=namespace,
        verify_interval=verify_interval,
        concurrency=concurrency,
        backoff_base=backoff_base,
        backoff_cap=backoff_max,
        timeouts=ClientTimeouts(
            connect=connect_timeout,
            read=read_timeout,
            load=load_timeout,
            unload=unload_timeout,
            smoke=smoke_timeout,
        ),
        shutdown_timeout=shutdown_timeout,
        release_llmkube_finalizer=release_llmkube_finalizer,
        adapter_metrics=AdapterMetrics(adapter_metrics),
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        lease=LeaseSettings(
            name=lease_name,
            namespace=lease_namespace or default_lease_namespace(),
            identity=identity or default_identity(),
            duration=lease_duration,
            renew_deadline=lease_renew_deadline,
            retry_period=lease_retry_period,
        ),
    )
    try:
        asyncio.run(serve(settings))
    except PulumiLoRAError as exc:  # credentials that don't load, say: a message, no traceback
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:  # a second Ctrl-C: stop without the graceful part
        raise SystemExit(130) from None
