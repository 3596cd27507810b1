"""A kubeconfig given as content never appears in the error about it (it holds credentials)."""

from __future__ import annotations

import traceback

import pytest

from pulumi_lora._cluster import KubeSource, proxy_access
from pulumi_lora._errors import ClusterError, TransportUnavailable

TOKEN = "tok-0123456789abcdef0123456789"


@pytest.mark.parametrize(
    "content",
    [
        f'apiVersion: v1\nusers:\n- name: a\n  user: {{token: "{TOKEN}, x: y}}\n',  # unclosed
        f"apiVersion: v1\nusers: [{{name: a, user: {{token: {TOKEN}}}}}\ncontexts: []\n",
        f"apiVersion: v1\nclusters: {TOKEN}\n",  # valid YAML, not a kubeconfig
    ],
)
def test_content_errors_quote_nothing_and_chain_nothing(content: str) -> None:
    with pytest.raises(ClusterError) as caught:
        KubeSource(kubeconfig=content).load()
    reported = "".join(traceback.format_exception(caught.value))
    assert "cannot load cluster credentials from the given kubeconfig" in reported
    assert TOKEN[:8] not in reported
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_yaml_error_still_says_where() -> None:
    with pytest.raises(ClusterError, match=r"ParserError: .* at line 3, column 1"):
        KubeSource(kubeconfig=f"apiVersion: v1\nusers: [{{token: {TOKEN}}}\nx: 1\n").load()


def test_a_path_error_keeps_its_detail() -> None:
    with pytest.raises(ClusterError, match="/nonexistent/kubeconfig not found") as caught:
        KubeSource(kubeconfig="/nonexistent/kubeconfig").load()
    assert caught.value.__cause__ is not None


EKS = """apiVersion: v1
clusters: [{name: eks, cluster: {server: "https://eks.example:443"}}]
contexts: [{name: arn:aws:eks:eu-west-1:1:cluster/prod, context: {cluster: eks, user: eks}}]
current-context: arn:aws:eks:eu-west-1:1:cluster/prod
users:
- name: eks
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: /usr/local/bin/aws
      args: [eks, get-token, --cluster-name, prod]
"""
GKE_LEGACY = """apiVersion: v1
clusters: [{name: gke, cluster: {server: "https://gke.example"}}]
contexts: [{name: gke_prod, context: {cluster: gke, user: gke}}]
current-context: gke_prod
users: [{name: gke, user: {auth-provider: {name: gcp}}}]
"""
ADVICE = (
    "(as EKS, GKE and AKS kubeconfigs do), and the proxy transport takes only a token or a "
    "client certificate. Use transport 'delegated' (the in-cluster re-sync loop loads; "
    "docs/resync.md), 'direct' from inside the cluster, or a kubeconfig with a ServiceAccount "
    "token (kubectl create token) for 'proxy'"
)


def test_the_proxy_transport_names_the_exec_plugin_it_cannot_use() -> None:
    with pytest.raises(TransportUnavailable) as caught:
        proxy_access(KubeSource(kubeconfig=EKS))
    assert str(caught.value) == (
        "cannot reach the SGLang pods: the proxy transport cannot use context "
        "'arn:aws:eks:eu-west-1:1:cluster/prod': it authenticates with the exec plugin 'aws' "
        + ADVICE
    )


def test_the_proxy_transport_names_the_auth_provider_it_cannot_use() -> None:
    with pytest.raises(TransportUnavailable) as caught:
        proxy_access(KubeSource(kubeconfig=GKE_LEGACY))
    assert str(caught.value) == (
        "cannot reach the SGLang pods: the proxy transport cannot use context 'gke_prod': it "
        "authenticates with the auth-provider 'gcp' " + ADVICE
    )
