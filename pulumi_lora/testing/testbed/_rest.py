"""The testbed's own REST access to its apiserver: exact JSON in, exact JSON out.

The testbed plays controllers (it creates Pods, patches ``pods/NAME/status``, applies CRDs) and
sends precisely the objects it builds, so it talks plain REST over one thread-safe httpx2 client
with TLS verification on, rather than round-tripping through typed models. Users and tests get a
lightkube client from :meth:`Testbed.client` instead.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2

__all__ = ["ApiRequestError", "KubeRest", "grant_cluster_role"]

_BODY_LIMIT = 500


class ApiRequestError(RuntimeError):
    """The apiserver answered a testbed request with a non-2xx status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        try:
            message = str(json.loads(body).get("message", body))
        except (ValueError, AttributeError):
            message = body
        super().__init__(f"{method} {path}: {status} {message[:_BODY_LIMIT]}")


class KubeRest:
    """A minimal JSON client for the apiserver, safe to share between threads."""

    def __init__(self, server: str, token: str, context: ssl.SSLContext) -> None:
        self._http = httpx2.Client(
            base_url=server,
            verify=context,
            trust_env=False,
            timeout=httpx2.Timeout(30.0, connect=5.0),
            headers={"Authorization": f"Bearer {token}"},
        )

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        allow: tuple[int, ...] = (),
    ) -> Any:
        """Send one request; return the decoded JSON body (``None`` for a status in ``allow``)."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        answer = self._http.request(method, path, content=content, headers=headers, params=params)
        if answer.status_code in allow:
            return None
        if answer.status_code >= 300:
            raise ApiRequestError(method, path, answer.status_code, answer.text)
        return answer.json() if answer.content else None

    @contextmanager
    def stream(
        self, method: str, path: str, *, params: dict[str, str], timeout: httpx2.Timeout
    ) -> Iterator[httpx2.Response]:
        """A streamed request (a watch): the response is read line by line by the caller."""
        with self._http.stream(method, path, params=params, timeout=timeout) as response:
            yield response

    def put(self, path: str, body: Any) -> Any:
        """PUT ``body`` (a whole object, with its resourceVersion) at ``path``."""
        return self.request("PUT", path, body=body)

    def get(self, path: str, *, allow: tuple[int, ...] = ()) -> Any:
        """GET ``path``."""
        return self.request("GET", path, allow=allow)

    def create(self, path: str, body: Any) -> Any:
        """POST ``body`` to the collection at ``path``."""
        return self.request("POST", path, body=body)

    def merge_patch(self, path: str, body: Any, *, allow: tuple[int, ...] = ()) -> Any:
        """JSON-merge-patch the object at ``path`` (lists in ``body`` replace whole lists)."""
        return self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json", allow=allow
        )

    def strategic_merge_patch(self, path: str, body: Any, *, allow: tuple[int, ...] = ()) -> Any:
        """Strategic-merge-patch the object at ``path`` (lists merged by their keys, as the
        kubelet patches a pod's status: ``conditions`` by ``type``)."""
        return self.request(
            "PATCH",
            path,
            body=body,
            content_type="application/strategic-merge-patch+json",
            allow=allow,
        )

    def apply(self, path: str, body: Any, field_manager: str) -> Any:
        """Server-side apply ``body`` at ``path`` as ``field_manager``, forcing conflicts."""
        return self.request(
            "PATCH",
            path,
            body=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": field_manager, "force": "true"},
        )

    def delete(
        self, path: str, *, grace_period: int | None = None, allow: tuple[int, ...] = (404,)
    ) -> Any:
        """DELETE the object at ``path`` (a missing object is fine by default)."""
        body = None if grace_period is None else {"gracePeriodSeconds": grace_period}
        return self.request("DELETE", path, body=body, allow=allow)


def grant_cluster_role(
    rest: KubeRest,
    name: str,
    rules: list[dict[str, Any]],
    subject: dict[str, str],
    field_manager: str,
    *,
    binding: str | None = None,
) -> None:
    """Apply ClusterRole ``name`` with ``rules`` and a ClusterRoleBinding (``binding``, default
    the same name) of it to ``subject``."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }
    bound = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": binding or name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [subject],
    }
    rest.apply(f"{rbac}/clusterroles/{name}", role, field_manager)
    rest.apply(f"{rbac}/clusterrolebindings/{binding or name}", bound, field_manager)
