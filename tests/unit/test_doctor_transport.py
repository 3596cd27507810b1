"""doctor tries the transports from where it runs and says which one to set, and its fix for an
unreachable pod names the real cause (no route vs nothing listening)."""

from __future__ import annotations

from pulumi_lora._ops._doctor import (
    CheckStatus,
    ServerProbe,
    TransportTrial,
    check_server,
    check_transport,
)

UNREACHABLE = "connection failed (ConnectError: [Errno 101] Network is unreachable)"


def test_only_proxy_works_from_a_laptop() -> None:
    check = check_transport(
        [
            TransportTrial("direct", 0, 2, f"pod llama-0: {UNREACHABLE}"),
            TransportTrial("proxy", 2, 2),
        ]
    )
    assert check.status is CheckStatus.WARN
    assert check.message == (
        "only transport 'proxy' reaches the pods from here (direct: 0/2 pods (pod llama-0: "
        f"{UNREACHABLE}); proxy: 2/2 pods)"
    )
    assert check.fix == (
        "set the adapters' transport input to 'proxy' (transport=\"proxy\"; the examples read "
        "it from stack config: pulumi config set transport proxy); the default 'direct' cannot "
        "reach these pods"
    )


def test_direct_works_in_the_cluster_and_nothing_works_elsewhere() -> None:
    assert check_transport([TransportTrial("direct", 2, 2)]).status is CheckStatus.OK
    none = check_transport([TransportTrial("direct", 0, 1, "x"), TransportTrial("proxy", 0, 1)])
    assert none.status is CheckStatus.FAIL
    assert none.fix.startswith("use transport 'delegated'")


def test_the_fix_for_an_unreachable_pod_names_the_cause() -> None:
    no_route = check_server(ServerProbe("a", False, error=UNREACHABLE), "direct")
    assert no_route.fix.startswith("the pod IP is not routable from here: use transport 'proxy'")
    refused = "connection failed (ConnectError: [Errno 111] Connection refused)"
    closed = check_server(ServerProbe("a", False, error=refused), "direct")
    assert closed.fix == "check that the pod's sglang container listens on its port named http"
