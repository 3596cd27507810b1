"""``ResyncDeployment``'s cluster: a ``kubeconfig`` (issue 41) or a provider in ``opts``."""

from __future__ import annotations

import pulumi
import pytest

from pulumi_lora.deploy import ResyncDeployment


def test_a_kubeconfig_and_a_provider_together_are_refused_before_anything_is_made() -> None:
    opts = pulumi.ResourceOptions(providers={"kubernetes": object()})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="kubeconfig or a provider in opts, not both"):
        ResyncDeployment(
            "loop", namespace="ops", image="img:1", kubeconfig="~/.kube/config", opts=opts
        )
