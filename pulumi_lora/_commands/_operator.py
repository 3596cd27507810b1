"""The operator commands ``status``, ``doctor``, ``coexistence-policy`` and ``rbac`` (click).

Thin: gather (``_ops._gather``), judge (``_ops._status``, ``_ops._doctor``), print. ``status``
and ``doctor`` exit 0 when all is good, 1 when something needs fixing, 2 when they could not run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NoReturn

import click
import yaml

from pulumi_lora._commands._options import COMMAND_SETTINGS, kube_source, output, transport
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import POOL
from pulumi_lora._models import LLMKUBE_CONTROLLER_USER, Transport
from pulumi_lora._ops import _doctor, _gather, _status

__all__ = [
    "doctor_command",
    "gate_command",
    "policy_command",
    "render_table",
    "status_command",
]

#: Exit code for "could not run": click uses it for usage errors too.
EXIT_UNUSABLE = 2
#: Longest error text in a table cell (``--output json`` always has the whole text).
MAX_CELL = 160
#: The first line ``readiness-gate`` prints (a YAML comment: kubectl and Helm skip it).
GATE_REQUIRES = (
    "# Requires Kubernetes 1.36 or later: MutatingAdmissionPolicy in "
    "admissionregistration.k8s.io/v1 (pulumi-lora doctor says whether a cluster serves it)"
)


@click.command("status", context_settings=COMMAND_SETTINGS)
@click.option("-n", "--namespace", help="namespace of the LoRAAdapters (default: the context's)")
@click.option("-A", "--all-namespaces", is_flag=True, help="LoRAAdapters of every namespace")
@kube_source()
@transport(
    "how to reach the pods (default: each CR's recorded transport; delegated CRs are "
    "then judged by their Loaded condition)"
)
@output
@click.pass_context
def status_command(  # noqa: PLR0917 - one parameter per click option
    ctx: click.Context,
    namespace: str | None,
    all_namespaces: bool,
    kube: KubeSource,
    transport: Transport | None,
    output: str,
) -> None:
    """Show every LoRAAdapter and whether each Ready pod of its target serves it.

    Reads the CRs and each Ready pod's /v1/models the way `pulumi refresh` does (the API key
    Secret a CR's pulumi-lora.dev/api-key-secret annotation names is used, never printed).
    Pods with pulumi-lora's readiness gate show as "(gated)"; those it holds unready past
    120 s are listed under the summary. Exit 0: every declared adapter is loaded, at its path,
    on every Ready pod; 1: drift or errors; 2: usage or cluster access error.
    """
    if namespace and all_namespaces:
        raise click.UsageError("give either --namespace or --all-namespaces, not both")
    try:
        scope = None if all_namespaces else (namespace or POOL.kube(kube).namespace)
        report = _gather.gather_status(kube, scope, transport)
    except PulumiLoRAError as exc:
        _fail(ctx, str(exc))
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(_status_table(report, where=scope))
    ctx.exit(report.exit_code)


@click.command("doctor", context_settings=COMMAND_SETTINGS)
@click.argument("inference_service")
@click.option("-n", "--namespace", help="the InferenceService's namespace (default: the context's)")
@kube_source()
@transport(
    "how to reach the pods: their IPs (in-cluster or a routed pod network) or the "
    "apiserver's pod proxy (anywhere; unkeyed servers only); default: try direct, then proxy, "
    "and say which works"
)
@click.option(
    "--api-key-secret",
    metavar="NAME[/KEY]",
    help="Secret (in the InferenceService's namespace) holding the SGLang API key; KEY "
    "defaults to api-key",
)
@output
@click.pass_context
def doctor_command(  # noqa: PLR0917 - one parameter per click option
    ctx: click.Context,
    inference_service: str,
    namespace: str | None,
    kube: KubeSource,
    transport: Transport | None,
    api_key_secret: str | None,
    output: str,
) -> None:
    """Check that an InferenceService can take LoRA adapters at run time, and say what to fix.

    Checks runtime sglang, --enable-lora, the LoRA pool flags, data-parallel size 1, adapter
    volumes, Service vs container port, pods found and Ready, whether the cluster serves the
    readiness gate's MutatingAdmissionPolicy v1 (Kubernetes 1.36+) and which pods the gate
    holds unready, and each Ready pod's SGLang (reachable, LoRA on, version >= 0.5.5). Exit 0:
    no check failed; 1: a check failed; 2: usage or cluster access error.
    """
    secret = _parse_secret(api_key_secret)
    try:
        where = namespace or POOL.kube(kube).namespace
        facts = _gather.gather_doctor(
            kube,
            where,
            inference_service,
            transport=transport,
            api_key_secret=secret,
        )
    except PulumiLoRAError as exc:
        _fail(ctx, str(exc))
    report = _doctor.diagnose(facts)
    if output == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(_doctor_text(report))
    ctx.exit(report.exit_code)


@click.command("coexistence-policy", context_settings=COMMAND_SETTINGS)
@click.option(
    "--llmkube-user",
    default=LLMKUBE_CONTROLLER_USER,
    show_default=True,
    help="the user LLMKube's controller manager acts as (its ServiceAccount)",
)
@click.option(
    "--all-adapters",
    is_flag=True,
    help="hold LLMKube off every LoRAAdapter (the re-sync loop serves them all), not only the "
    "CRs the provider made (annotation pulumi-lora.dev/managed-by)",
)
@click.option(
    "--name",
    default="pulumi-lora",
    show_default=True,
    help="prefix of the names (the loop's own policy is <its name>-llmkube-coexistence)",
)
def policy_command(llmkube_user: str, all_adapters: bool, name: str) -> None:
    """Print the admission policy that holds LLMKube's LoRA controller off pulumi-lora's CRs.

    LLMKube's own LoRA controller runs in every LLMKube install and cannot be switched off. This
    ValidatingAdmissionPolicy (Kubernetes 1.30+) refuses it adding its finalizer to, and writing
    the status of, the LoRAAdapters pulumi-lora serves; it then backs off on them and never
    loads them through the Service. Apply it with:

        pulumi-lora coexistence-policy | kubectl apply -f -
    """
    from pulumi_lora.deploy import coexistence_policy  # noqa: PLC0415 - it imports pulumi

    manifests = coexistence_policy(name, llmkube_user=llmkube_user, managed_only=not all_adapters)
    click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)


@click.command("readiness-gate", context_settings=COMMAND_SETTINGS)
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="a namespace whose SGLang pods get the gate (repeat it; default: every namespace)",
)
@click.option(
    "--name",
    default="pulumi-lora-resync-readiness-gate",
    show_default=True,
    help="name of the policy and its binding",
)
@click.option(
    "--drain-on-stop",
    "drain",
    type=click.IntRange(0, 300),
    default=5,
    show_default=True,
    metavar="SECONDS",
    help="preStop sleep given to the sglang container, so a deleted pod keeps answering while "
    "kube-proxy and gateways take it out of rotation (0: none; a container's own preStop is kept)",
)
def gate_command(namespaces: tuple[str, ...], name: str, drain: int) -> None:
    """Print the admission policy that gives SGLang pods pulumi-lora's readiness gate.

    A MutatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1, Kubernetes 1.36
    and later) that add readinessGates: [{conditionType: pulumi-lora.dev/adapters-loaded}] to
    every new SGLang pod of an LLMKube InferenceService. Such a pod turns Ready only once the
    re-sync loop says it serves its InferenceService's adapters, so the loop must run, with
    patch on pods/status in those namespaces (resync_manifests(readiness_gate=True) renders
    both): without it the gated pods never turn Ready. Apply it with:

        pulumi-lora readiness-gate -n models | kubectl apply -f -
    """
    from pulumi_lora._kube._gate_policy import readiness_gate_policy  # noqa: PLC0415

    manifests = readiness_gate_policy(name, list(namespaces), drain_on_stop_seconds=drain)
    click.echo(GATE_REQUIRES)
    click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)


@click.command("rbac", context_settings=COMMAND_SETTINGS)
@click.option(
    "--transport",
    type=click.Choice([t.value for t in Transport]),
    default=Transport.DIRECT.value,
    show_default=True,
    help="the adapters' transport",
)
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="a namespace of the CRs or their targets (repeat); none: a ClusterRole, refused for "
    "--staging, --transport proxy, --api-key-secrets and --readiness-gate (they reach into a "
    "namespace)",
)
@click.option("--api-key-secrets", is_flag=True, help="the servers take a key from a Secret")
@click.option("--staging", is_flag=True, help="some adapters are staged (source=...)")
@click.option(
    "--readiness-gate",
    "gated",
    is_flag=True,
    help="the targets' pods carry the readiness gate: a swap writes it pod by pod (direct, proxy)",
)
@click.option(
    "--subject",
    help="bind it to user:NAME, group:NAME or serviceaccount:NAMESPACE/NAME",
)
@click.option("--name", default="pulumi-lora-provider", show_default=True, help="the role's name")
@click.option(
    "--loop-namespace",
    help="delegated, with -n: where the re-sync loop runs (its Lease is read there)",
)
def rbac_command(  # noqa: PLR0917 - one parameter per click option
    transport: str,
    namespaces: tuple[str, ...],
    api_key_secrets: bool,
    staging: bool,
    gated: bool,
    subject: str | None,
    name: str,
    loop_namespace: str | None,
) -> None:
    """Print the least-privilege Role (ClusterRole with no namespace) that whoever runs
    `pulumi` needs for these adapters, and its binding with --subject:

        pulumi-lora rbac -n models --subject user:ci-deployer | kubectl apply -f -

    What reaches into a namespace past the CRs (Jobs for --staging, the pod proxy for
    --staging and --transport proxy, Secrets for --api-key-secrets, pods' status for
    --readiness-gate) is granted only in the namespaces named with -n, never cluster-wide.
    """
    from pulumi_lora._kube._rbac import parse_subject, provider_rbac  # noqa: PLC0415

    try:
        bound = parse_subject(subject) if subject else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--subject") from None
    try:
        manifests = provider_rbac(
            Transport(transport),
            namespaces,
            keyed=api_key_secrets,
            staging=staging,
            gated=gated,
            subject=bound,
            name=name,
            loop_namespace=loop_namespace,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)


def _parse_secret(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    name, _, key = value.partition("/")
    if not name:
        raise click.BadParameter("expected NAME or NAME/KEY", param_hint="--api-key-secret")
    return name, key or "api-key"


def _fail(ctx: click.Context, message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    ctx.exit(EXIT_UNUSABLE)


# --- rendering (pure) ---------------------------------------------------------------------------

STATUS_COLUMNS = (
    "NAMESPACE",
    "NAME",
    "ADAPTER",
    "TARGET",
    "POD",
    "LOADED",
    "PATH",
    "LAST LOADED",
    "ERROR",
)

_LOADED_WORDS = {
    _status.ServedState.OK: "yes",
    _status.ServedState.MISSING: "no",
    _status.ServedState.WRONG_PATH: "wrong path",
    _status.ServedState.UNREACHABLE: "unknown",
    _status.ServedState.NOT_READY: "not ready",
    _status.ServedState.STILL_SERVED: "yes (deleting)",
    _status.ServedState.UNLOADED: "no (unloaded)",
}


def _status_table(report: _status.StatusReport, where: str | None) -> str:
    """Pure: one row per CR and pod (one row for a CR without pods), then a summary line."""
    if not report.adapters:
        scope = f"namespace {where}" if where else "any namespace"
        return f"no LoRAAdapters in {scope}"
    rows: list[Sequence[str]] = []
    for line in report.adapters:
        head = (
            line.namespace,
            line.name,
            line.adapter,
            f"{line.target_namespace}/{line.target_name}",
        )
        last = line.last_loaded_at or "-"
        if line.observed == "conditions" or not line.pods:
            spot = "(loop)" if line.observed == "conditions" else "-"
            loaded = "yes" if line.verdict is _status.AdapterVerdict.OK else "no"
            rows.append((*head, spot, loaded, line.path, last, _cell(line.error)))
            continue
        # A CR-wide problem with no pod to pin it on (no Ready pods) goes on its first row.
        spare = "" if any(p.error for p in line.pods) else line.error
        for index, pod in enumerate(line.pods):
            error = pod.error or (spare if index == 0 else "")
            loaded = _LOADED_WORDS[pod.state]
            name = f"{pod.pod} (gated)" if pod.gated else pod.pod
            rows.append((*head, name, loaded, pod.path or "-", last, _cell(error)))
    counts = report.counts()
    summary = (
        f"{counts['adapters']} LoRAAdapter(s): {counts['ok']} ok, {counts['drift']} drift, "
        f"{counts['error']} error"
    )
    if counts["deleting"]:  # only then: the line reads as before for stacks without one
        summary += f", {counts['deleting']} deleting"
    deleting = [a for a in report.adapters if a.verdict is _status.AdapterVerdict.DELETING]
    if deleting:  # what lets each go (a failed destroy's CR waits on its pods)
        summary += "\n\nBeing deleted:\n" + "\n".join(
            f"  {line.namespace}/{line.name}: {line.error}" for line in deleting
        )
    contested = [line for line in report.adapters if line.llmkube]
    if contested:
        summary += "\n\nLLMKube's own LoRA controller acts on:\n" + "\n".join(
            f"  {line.namespace}/{line.name}: {line.llmkube}" for line in contested
        )
        summary += f"\nfix: {_status.COEXISTENCE_FIX}"
    unserved = [line for line in report.adapters if line.not_served_since]
    if unserved:  # what PulumiLoRAAdapterNotServed would say (the loop's Loaded condition)
        summary += "\n\nNot served on every Ready pod (the re-sync loop's Loaded condition):\n"
        summary += "\n".join(
            f"  {line.namespace}/{line.name}: since {line.not_served_since}" for line in unserved
        )
    full = [line for line in report.adapters if line.capacity]
    if full:  # what PulumiLoRACapacityExhausted would say
        summary += "\n\nOver capacity:\n" + "\n".join(
            f"  {line.namespace}/{line.name}: {line.capacity}" for line in full
        )
    if report.held:  # what PulumiLoRAPodHeldUnready would say, sooner
        summary += (
            f"\n\nHeld unready by the readiness gate for more than {_status.HELD_AFTER} s "
            "(containers ready, pulumi-lora.dev/adapters-loaded not True):\n"
        )
        summary += "\n".join(
            f"  {h.namespace}/{h.pod}: since {h.since} ({h.held_for}): {h.message}"
            for h in report.held
        )
        summary += f"\nrunbook: {_status.HELD_RUNBOOK} (alert PulumiLoRAPodHeldUnready)"
    return render_table(STATUS_COLUMNS, rows) + "\n\n" + summary


def _doctor_text(report: _doctor.DoctorReport) -> str:
    """Pure: one line per check (status, name, message), the fix indented under it."""
    lines = [f"InferenceService {report.namespace}/{report.name}"]
    width = max((len(_check_label(c)) for c in report.checks), default=0)
    for check in report.checks:
        lines.append(f"  {check.status.value:<4}  {_check_label(check):<{width}}  {check.message}")
        if check.fix and check.status is not _doctor.CheckStatus.OK:
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {check.fix}")
    counts = report.counts()
    lines.append("")
    lines.append(f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail")
    return "\n".join(lines)


def _check_label(check: _doctor.Check) -> str:
    return f"{check.name} ({check.pod})" if check.pod else check.name


def _cell(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_CELL else flat[: MAX_CELL - 1] + "…"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Pure: left-aligned columns, two spaces apart, as kubectl prints them."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (headers, *rows)
    ]
    return "\n".join(lines)
