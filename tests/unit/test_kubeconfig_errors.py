"""A kubeconfig given as content never appears in the error about it (it holds credentials)."""

from __future__ import annotations

import traceback

import pytest

from pulumi_lora._errors import ClusterError
from pulumi_lora._kube._source import KubeSource, proxy_access

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


def test_the_proxy_transport_takes_an_exec_plugin_user() -> None:
    access = proxy_access(KubeSource(kubeconfig=EKS))
    assert access.auth is not None and not access.headers  # the plugin runs on first use
