"""Whether a cluster serves the readiness gate's admission policy kind, by API discovery.

The gate's policy (``_kube._gate_policy``) is a ``MutatingAdmissionPolicy`` in
``admissionregistration.k8s.io/v1``: GA and served by default from Kubernetes 1.36. 1.34 and
1.35 serve the kind in ``v1beta1`` only, with the ``MutatingAdmissionPolicy`` feature gate and
that API turned on; 1.32 and 1.33 in ``v1alpha1`` likewise; older clusters not at all.

:func:`policy_versions` asks the apiserver (one GET of ``/apis/admissionregistration.k8s.io/V``
per version, ``v1`` first, the others only when ``v1`` lacks it); :func:`gate_refusal` is the
pure verdict ``ResyncDeployment(readiness_gate=True)`` acts on, before anything is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx2
from lightkube import Client

from pulumi_lora._errors import ClusterError, PulumiLoRAError
from pulumi_lora._kube._objects import apiserver_errors
from pulumi_lora._kube._source import KubeSource, make_client

__all__ = [
    "GATE_API",
    "MIN_KUBERNETES",
    "POLICY_RESOURCE",
    "gate_refusal",
    "policy_versions",
    "served_words",
    "versions_at",
]

GROUP = "admissionregistration.k8s.io"
#: The discovery name of the kind (``kind: MutatingAdmissionPolicy``).
POLICY_RESOURCE = "mutatingadmissionpolicies"
#: The version the gate's policy is rendered at, and the Kubernetes release that serves it.
GATE_API = f"{GROUP}/v1"
MIN_KUBERNETES = "1.36"
#: Asked in this order; a cluster that serves ``v1`` is not asked the others.
VERSIONS = ("v1", "v1beta1", "v1alpha1")
#: How long one discovery GET may take (a ``pulumi preview`` waits on it).
TIMEOUT = 10.0

_RELEASES = {
    "v1beta1": "Kubernetes 1.34 and 1.35, behind the MutatingAdmissionPolicy feature gate",
    "v1alpha1": "Kubernetes 1.32 and 1.33, alpha, behind the MutatingAdmissionPolicy feature gate",
}


def policy_versions(client: Client, timeout: float = TIMEOUT) -> tuple[str, ...]:
    """The versions of ``admissionregistration.k8s.io`` that serve ``MutatingAdmissionPolicy``
    (``("v1",)`` on 1.36 and later; ``()`` where none does). Raises ``ClusterError`` when the
    apiserver does not say (no connection, a refusal, a body that is not a resource list)."""
    generic: Any = client._client  # lightkube's generic client; its httpx2 client is _client
    found: list[str] = []
    for version in VERSIONS:
        path = f"/apis/{GROUP}/{version}"
        request = generic._client.build_request("GET", path, timeout=timeout)
        with apiserver_errors():
            response: httpx2.Response = generic.send(request)
        if response.status_code == 404:  # the version is not served at all
            continue
        if response.status_code != 200:
            raise ClusterError(
                f"API discovery (GET {path}) failed: HTTP {response.status_code} "
                f"{response.reason_phrase}"
            )
        try:
            listed = response.json().get("resources") or []
        except (ValueError, AttributeError) as exc:
            raise ClusterError(f"API discovery (GET {path}) answered no resource list") from exc
        if any(isinstance(r, dict) and r.get("name") == POLICY_RESOURCE for r in listed):
            found.append(version)
            if version == VERSIONS[0]:
                break
    return tuple(found)


def versions_at(source: KubeSource, timeout: float = TIMEOUT) -> tuple[str, ...] | str:
    """:func:`policy_versions` of the cluster ``source`` names, or why it could not be asked
    (the kubeconfig cannot be loaded, the apiserver does not answer), in words."""
    try:
        return policy_versions(make_client(source), timeout)
    except (PulumiLoRAError, httpx2.HTTPError) as exc:
        return str(exc) or type(exc).__name__


def served_words(versions: Sequence[str]) -> str:
    """Pure: what a cluster whose discovery lists ``versions`` serves, in words."""
    if VERSIONS[0] in versions:
        return f"MutatingAdmissionPolicy in {GATE_API}"
    older = next((v for v in VERSIONS if v in versions), None)
    if older is None:
        return "no MutatingAdmissionPolicy at all"
    return f"MutatingAdmissionPolicy only in {GROUP}/{older} ({_RELEASES[older]})"


def gate_refusal(versions: Sequence[str]) -> str | None:
    """Pure: why ``readiness_gate=True`` must not be applied to a cluster whose discovery lists
    ``versions``, or None when it serves the policy at ``v1``."""
    if VERSIONS[0] in versions:
        return None
    return (
        f"readiness_gate=True needs MutatingAdmissionPolicy in {GATE_API} (Kubernetes "
        f"{MIN_KUBERNETES} or later), and this cluster serves {served_words(versions)}. "
        "Nothing was applied: deploy the re-sync loop without readiness_gate (pods then turn "
        f"Ready before their adapters load), or upgrade the cluster to Kubernetes {MIN_KUBERNETES} "
        "or later"
    )
