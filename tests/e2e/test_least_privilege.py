"""Least privilege, written and tested (issue 41): the provider's whole lifecycle as an identity
bound to exactly what ``pulumi-lora rbac`` prints, and no more."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pulumi_lora._commands._main import cli
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._kube._source import KubeSource
from pulumi_lora._lifecycle import STAGERS, ProviderConfig
from pulumi_lora._models import Transport
from pulumi_lora.testing.deployer import bound_identity
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.testbed import InferenceServiceHandle, Testbed

from .conftest import adapter_props, provider_for, served


def test_the_printed_role_is_enough_for_create_refresh_swap_and_delete(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, tmp_path: Path
) -> None:
    kubeconfig = bound_identity(testbed, namespace, tmp_path)
    provider = provider_for(ProviderConfig(kube=KubeSource(str(kubeconfig))))
    first, second = testbed.make_adapter("least-v1"), testbed.make_adapter("least-v2")
    props = adapter_props(namespace, first, "least")
    made = provider.create(props)
    assert all(pod == {"least": first} for pod in served(isvc).values())
    outs = {**props, **(made.outs or {})}
    read = provider.read(made.id, outs)
    assert read.id == made.id and (read.outs or {})["loaded"] is True
    swapped = provider.update(made.id, outs, {**props, "path": second}).outs or {}
    assert all(pod == {"least": second} for pod in served(isvc).values())
    provider.delete(made.id, {**props, **swapped, "path": second})
    assert all(pod == {} for pod in served(isvc).values())
    listed = testbed.kubectl("get", "loraadapters", "-n", namespace, "-o", "name")
    assert listed.returncode == 0 and listed.stdout.strip() == ""


def test_without_the_role_the_identity_is_refused_by_name(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, tmp_path: Path
) -> None:
    """The control: the same identity bound in another namespace cannot create here, and the
    error says which permission the apiserver refused."""
    elsewhere = testbed.create_namespace("elsewhere")
    kubeconfig = bound_identity(testbed, elsewhere, tmp_path)
    provider = provider_for(ProviderConfig(kube=KubeSource(str(kubeconfig))))
    props = adapter_props(namespace, testbed.make_adapter("refused"), "refused")
    with pytest.raises(PulumiLoRAError, match=r"(?i)forbidden|403"):
        provider.create(props)
    assert all(pod == {} for pod in served(isvc).values())


def test_doctor_names_what_the_identity_lacks_by_verb_and_resource(
    testbed: Testbed, namespace: str, isvc: InferenceServiceHandle, tmp_path: Path
) -> None:
    """Bound to the ``direct`` Role, the identity passes doctor's permissions check for
    ``direct``; asked about ``proxy``, doctor names the pod proxy it may not use, and the
    command that grants it."""
    kubeconfig = bound_identity(testbed, namespace, tmp_path)

    def doctor(transport: str) -> str:
        argv = ["doctor", "llama", "-n", namespace, "--kubeconfig", str(kubeconfig)]
        return CliRunner().invoke(cli, [*argv, "--transport", transport]).output

    direct = next(ln for ln in doctor("direct").splitlines() if "permissions" in ln)
    assert direct.split()[0] == "ok", direct
    assert f"may do all the provider does (direct) in {namespace}" in direct
    proxy = doctor("proxy")
    line = next(ln for ln in proxy.splitlines() if "permissions" in ln)
    assert line.split()[0] == "fail", proxy
    assert f"may not, in {namespace}: get pods/proxy, create pods/proxy" in line, proxy
    assert f"pulumi-lora rbac --transport proxy -n {namespace}" in proxy


def test_the_staging_role_is_enough_to_stage_load_and_clean_up(
    testbed: Testbed, namespace: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``--staging`` adds what staged adapters need (the stager's Job, reached through the pod
    proxy): a staged create, its refresh and its delete as exactly that Role."""
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=2, adapter_claim="adapters"
    )
    handle.wait_ready(timeout=60)
    write_adapter(tmp_path / "weights", seed="least-staged")
    files = {p.name: p.read_bytes() for p in (tmp_path / "weights").iterdir()}
    kubeconfig = bound_identity(testbed, namespace, tmp_path, staging=True)
    # no grace period: the delete's collection removes the directory, as that role
    provider = provider_for(ProviderConfig(kube=KubeSource(str(kubeconfig)), staging_grace=0))
    with PlayedHub() as hub:
        commit = hub.publish("acme/least", files, lfs=frozenset({"adapter_model.safetensors"}))
        testbed.expose_to_pods(hub.port)
        props = {
            **adapter_props(namespace, "", "least-staged"),
            "path": None,
            "source": f"hf://acme/least@{commit}",
            "source_endpoint": hub.endpoint,
        }
        made = provider.create(props)
        outs = {**props, **(made.outs or {})}
        assert all(pod == {"least-staged": outs["path"]} for pod in served(handle).values())
        assert "content_key" in (provider.read(made.id, outs).outs or {})  # verified in place
        provider.delete(made.id, outs)
    said = capfd.readouterr().err
    assert said.count("stager Job") == 1, said  # refresh and cleanup use the staging one
    STAGERS.close()  # the command ends: the stager with it (the identity may delete Jobs)
    root = testbed.claim_directory(namespace, "adapters")
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []
    jobs = testbed.kubectl("get", "jobs,loraadapters", "-n", namespace, "-o", "name")
    assert jobs.returncode == 0 and jobs.stdout.strip() == "", jobs.stdout


def test_the_proxy_role_is_enough_through_the_apiservers_pod_proxy(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    """``--transport proxy``: pods in network namespaces (the apiserver proxies to them as to a
    node's pods), a create, refresh and delete through ``pods/proxy`` as exactly that Role."""
    handle = testbed.deploy_inference_service(namespace, "llama", replicas=2, network="netns")
    handle.wait_ready(timeout=60)
    kubeconfig = bound_identity(testbed, namespace, tmp_path, Transport.PROXY)
    provider = provider_for(ProviderConfig(kube=KubeSource(str(kubeconfig))))
    path = testbed.make_adapter("least-proxy")
    props = adapter_props(namespace, path, "least-proxy", transport="proxy")
    made = provider.create(props)
    assert all(pod == {"least-proxy": path} for pod in served(handle).values())
    outs = {**props, **(made.outs or {})}
    assert (provider.read(made.id, outs).outs or {})["loaded"] is True
    provider.delete(made.id, outs)
    assert all(pod == {} for pod in served(handle).values())


def test_the_printed_staging_role_reaches_only_the_namespaces_named(
    testbed: Testbed, namespace: str
) -> None:
    """Issue 53: what ``pulumi-lora rbac --staging --api-key-secrets -n NS`` prints, applied as
    printed, lets its subject run Jobs, reach pods through the proxy and read Secrets in ``NS``
    and nowhere else: not kube-system, not a namespace it did not name. Without ``-n`` there is
    nothing to apply."""
    home = testbed.create_namespace("deployer")
    made = testbed.kubectl("create", "serviceaccount", "deployer", "-n", home)
    assert made.returncode == 0, made.stderr
    subject = ["--subject", f"serviceaccount:{home}/deployer"]
    flags = ["rbac", "--staging", "--api-key-secrets", *subject]
    refused = CliRunner().invoke(cli, flags)
    assert refused.exit_code == 2 and refused.stdout == ""
    printed = CliRunner().invoke(cli, [*flags, "-n", namespace])
    assert printed.exit_code == 0, printed.output
    applied = testbed.kubectl("apply", "-f", "-", input=printed.stdout)
    assert applied.returncode == 0, applied.stderr
    elsewhere = testbed.create_namespace("elsewhere")

    def may(verb: str, resource: str, where: str) -> bool:
        asked = testbed.kubectl(
            "auth", "can-i", verb, *resource.split(), "-n", where,
            "--as", f"system:serviceaccount:{home}:deployer",
        )  # fmt: skip
        assert asked.stdout.strip() in {"yes", "no"}, asked.stderr
        return asked.stdout.strip() == "yes"

    reaching = [("create", "jobs"), ("create", "pods --subresource=proxy"), ("get", "secrets")]
    assert all(may(verb, resource, namespace) for verb, resource in reaching)
    for where in ("kube-system", "default", elsewhere):
        assert not any(may(verb, resource, where) for verb, resource in reaching), where
