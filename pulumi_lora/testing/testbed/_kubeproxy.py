"""DNS and kube-proxy for the testbed's Services: ``http://<svc>.<ns>.svc:<port>`` reaches one
Ready pod behind the Service, as a cluster's would.

Only LLMKube's LoRA controller (``_core/_llmkube.py``) sends through a Service here: it loads
"through the Service", into whichever pod kube-proxy picks. ``<svc>.<ns>.svc:<port>`` reaches one
Ready pod selected by the Service's selector, chosen at random, at the Service's numeric
``targetPort``; a port nothing listens on refuses the connection.
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import quote

import httpx2

from pulumi_lora.testing.testbed._rest import KubeRest
from pulumi_lora.testing.testbed._workloads import CONTAINER_NAME, pod_ready

__all__ = ["HTTP_TIMEOUT_SECONDS", "ServiceProxy"]

HTTP_TIMEOUT_SECONDS = 30.0
"""LLMKube's HTTP client timeout (``http.Client{Timeout: 30 * time.Second}``)."""


class ServiceProxy:
    """DNS and kube-proxy for ``http://<svc>.<ns>.svc:<port>``: one Ready pod behind the Service.

    Reads Services and pods as the kube-proxy would (``rest``), picks a Ready pod matching the
    Service's selector at random, and sends to its IP at the Service's ``targetPort`` (a number,
    or the name of a container port); a port the container does not declare has nothing
    listening and is refused, without a packet sent.
    """

    def __init__(self, rest: KubeRest, rng: random.Random | None = None) -> None:
        self.rest = rest
        self._rng = rng or random.Random()  # noqa: S311 - load balancing, not security
        self._http = httpx2.Client(trust_env=False, timeout=HTTP_TIMEOUT_SECONDS)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def post(
        self, host: str, port: int, route: str, body: dict[str, str]
    ) -> tuple[str | None, httpx2.Response]:
        """POST JSON to ``http://host:port/route``; ``(pod picked, response)``.

        Raises :class:`httpx2.ConnectError` when no Ready pod backs the Service or nothing
        listens on the port, as a refused connection would.
        """
        name, namespace = _service_host(host)
        service = self.rest.get(f"/api/v1/namespaces/{namespace}/services/{name}", allow=(404,))
        if service is None:
            raise httpx2.ConnectError(f"dial tcp: lookup {host}: no such host")
        ports = service.get("spec", {}).get("ports", []) or []
        target = next((p.get("targetPort", p["port"]) for p in ports if p["port"] == port), None)
        selector = service.get("spec", {}).get("selector") or {}
        pods = [
            p
            for p in self._pods(namespace, selector)
            if pod_ready(p) and p.get("status", {}).get("podIP")
        ]
        if target is None or not pods:
            raise httpx2.ConnectError(f"dial tcp {host}:{port}: connect: connection refused")
        pod = self._rng.choice(pods)
        address = _backend(pod, target)
        if address is None:
            raise httpx2.ConnectError(f"dial tcp {host}:{port}: connect: connection refused")
        response = self._http.post(f"http://{address}{route}", json=body)
        return str(pod["metadata"]["name"]), response

    def _pods(self, namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        if not selector:
            return []
        labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        listing = self.rest.get(
            f"/api/v1/namespaces/{namespace}/pods?labelSelector={quote(labels)}"
        )
        return list((listing or {}).get("items", []))


def _service_host(host: str) -> tuple[str, str]:
    """``name.namespace.svc[.cluster.local]`` → ``(name, namespace)``."""
    parts = host.split(".")
    if len(parts) < 3 or parts[2] != "svc":
        raise httpx2.ConnectError(f"dial tcp: lookup {host}: no such host")
    return parts[0], parts[1]


def _backend(pod: dict[str, Any], target: int | str) -> str | None:
    """``ip:port`` a pod answers on for a Service's ``targetPort``, or None (nothing listens)."""
    ip = pod["status"]["podIP"]
    for container in pod.get("spec", {}).get("containers", []) or []:
        if container.get("name") != CONTAINER_NAME:
            continue
        for port in container.get("ports", []) or []:
            actual = int(port["containerPort"])
            if str(target) in {port.get("name"), str(actual)}:
                return f"{ip}:{actual}"
    return None
