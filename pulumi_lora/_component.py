"""The user-facing ``LoRAAdapter`` component and its dynamic child resource.

No ``from __future__ import annotations`` here: Pulumi's component-provider host reads these
annotations at run time to infer the schema it serves to other languages (``provider/``), and it
supports neither string annotations nor Unions. Output keys inside lists are single words, so they
survive the camelCase mapping unchanged.
"""

import pickle
from collections.abc import Callable
from typing import Any, NotRequired, Optional, TypedDict

import pulumi
from pulumi.dynamic import Resource

from pulumi_lora._provider import INPUT_KEYS, OUTPUT_KEYS, LoRAAdapterProvider

COMPONENT_OUTPUTS = (
    "adapter_name",
    "path",
    "namespace",
    "cr_name",
    "loaded",
    "available",
    "ready",
    "conditions",
    "pods",
    "loaded_path",
    "last_loaded_at",
)
"""The dynamic child's outputs the component re-exposes (its class annotations below)."""

TYPE_TOKEN = "pulumi-lora:index:LoRAAdapter"  # noqa: S105 - a type token, not a password
"""The component's type token; fixed, since renaming it would break existing stacks."""


class LoRAAdapterArgs(TypedDict):
    """The declaration of one adapter on one InferenceService."""

    adapter_name: pulumi.Input[str]
    """``spec.name``: the SGLang handle quoted in requests (1-63 chars of ``[A-Za-z0-9._-]``)."""
    path: pulumi.Input[str]
    """``spec.path``: the adapter directory (with adapter_config.json) in the sglang container."""
    inference_service: pulumi.Input[str]
    """``spec.inferenceServiceRef.name``: the target InferenceService."""
    inference_service_namespace: NotRequired[pulumi.Input[str]]
    """``spec.inferenceServiceRef.namespace``; defaults to ``namespace``."""
    namespace: NotRequired[pulumi.Input[str]]
    """The CR's namespace (default ``default``)."""
    resource_name: NotRequired[pulumi.Input[str]]
    """The CR's name; defaults to the adapter name made DNS-1123 safe."""
    pinned: NotRequired[pulumi.Input[bool]]
    """Pin the adapter in SGLang's memory pool (never evicted by ``--max-loaded-loras``)."""
    readiness_policy: NotRequired[pulumi.Input[str]]
    """``AllReadyPods`` (default) or ``AnyReadyPod``: what counts as loaded."""
    ready_timeout_seconds: NotRequired[pulumi.Input[float]]
    """How long to wait for the target's pods to be Ready (default 300)."""
    transport: NotRequired[pulumi.Input[str]]
    """``direct`` (pod IPs; default), ``proxy`` (apiserver pod proxy) or ``delegated``."""
    api_key_secret_name: NotRequired[pulumi.Input[str]]
    """A Secret in the InferenceService's namespace holding the SGLang API key."""
    api_key_secret_key: NotRequired[pulumi.Input[str]]
    """The key inside that Secret (default ``api-key``)."""
    kube_context: NotRequired[pulumi.Input[str]]
    """kubeconfig context for this resource (several clusters in one stack)."""
    kubeconfig_path: NotRequired[pulumi.Input[str]]
    """kubeconfig file for this resource (a path: the content never enters state)."""


class ConditionInfo(TypedDict):
    """One condition of the CR (``since`` is its lastTransitionTime)."""

    type: str
    status: str
    reason: str
    message: str
    since: str
    generation: Optional[int]


class PodStatus(TypedDict):
    """The adapter on one pod (``since``: when this project last loaded it there)."""

    pod: str
    ready: bool
    loaded: bool
    path: Optional[str]
    reason: str
    error: str
    since: Optional[str]


class LoRAAdapterResource(Resource):
    """The dynamic resource that does the work (one LoRAAdapter CR)."""

    def __init__(
        self, name: str, props: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        try:
            super().__init__(
                LoRAAdapterProvider(), name, {**props, **{k: None for k in OUTPUT_KEYS}}, opts
            )
        finally:
            unwrap_sorted_batch_setitems()


def unwrap_sorted_batch_setitems() -> None:
    """Undo the part of ``pulumi.dynamic.serialize_provider``'s pickler patch it never undoes.

    To pickle dicts in sorted order, every dynamic resource's construction wraps
    ``pickle._Pickler._batch_setitems`` in a function that calls the previous one, and restores
    only ``pickle.Pickler`` afterwards. The wrappers pile up, one per dynamic resource made in
    the process: after about 480, every further construction fails with "maximum recursion
    depth exceeded" (found by the chaos run: an Automation API process running ``pulumi up``
    of 20 adapters 25 times). Restoring the innermost, original method after each construction
    keeps the next construction's sorting (it wraps afresh) and the depth at one.
    """
    pickler: Any = vars(pickle)["_Pickler"]
    method: Callable[..., Any] = pickler._batch_setitems
    while method.__name__ != "_batch_setitems" and method.__closure__:
        inner = [c.cell_contents for c in method.__closure__ if callable(c.cell_contents)]
        if len(inner) != 1:  # not the wrapper we know: leave it alone
            return
        method = inner[0]
    if method.__name__ == "_batch_setitems":
        pickler._batch_setitems = method


class LoRAAdapter(pulumi.ComponentResource):
    """One LLMKube LoRAAdapter CR, its adapter loaded on every Ready pod of the target."""

    adapter_name: pulumi.Output[str]
    path: pulumi.Output[str]
    namespace: pulumi.Output[str]
    cr_name: pulumi.Output[str]
    loaded: pulumi.Output[bool]
    available: pulumi.Output[bool]
    ready: pulumi.Output[bool]
    conditions: pulumi.Output[list[ConditionInfo]]
    pods: pulumi.Output[list[PodStatus]]
    loaded_path: pulumi.Output[Optional[str]]
    last_loaded_at: pulumi.Output[Optional[str]]

    def __init__(
        self, name: str, args: LoRAAdapterArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        props = {k: args.get(k) for k in INPUT_KEYS}
        self._resource = LoRAAdapterResource(name, props, pulumi.ResourceOptions(parent=self))
        for key in COMPONENT_OUTPUTS:
            setattr(self, key, getattr(self._resource, key))
        self.register_outputs({key: getattr(self, key) for key in COMPONENT_OUTPUTS})
