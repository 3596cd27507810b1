"""``LoRAAdapter``: one LLMKube LoRAAdapter CR as one Pulumi resource, for Python programs.

It is a dynamic resource (``LoRAAdapterProvider`` does the work) with its own type,
``pulumi-python:dynamic/lora:LoRAAdapter``. It used to be a component wrapping a dynamic
child; a component costs the engine two more steps and a second copy of the outputs in every
checkpoint of the state, which made an ``up`` of 300 adapters take twice as long (see
docs/performance.md). Stacks made by the component move to this resource with no load, no
replacement and no CR write: an alias names the old child, and the engine drops the empty
component. Other languages still get the component, from ``provider/`` (``_component``).

No ``from __future__ import annotations`` here: Pulumi's component-provider host reads the
argument and output types below at run time to infer the schema it serves to other languages,
and it supports neither string annotations nor Unions. Output keys inside lists are single
words, so they survive the camelCase mapping unchanged.
"""

import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NotRequired, Optional, TypedDict

import pulumi
from pulumi.dynamic import Resource

from pulumi_lora._provider import INPUT_KEYS, OUTPUT_KEYS, LoRAAdapterProvider

TYPE_TOKEN = "pulumi-lora:index:LoRAAdapter"  # noqa: S105 - a type token, not a password
"""The component's type token (other languages, and Python stacks made while ``LoRAAdapter``
was a component); fixed, since renaming it would break existing stacks."""
RESOURCE_TYPE = "pulumi-python:dynamic/lora:LoRAAdapter"
"""The type of a Python program's ``LoRAAdapter`` (a dynamic resource with its own type)."""
DYNAMIC_TYPE = "pulumi-python:dynamic:Resource"
"""The type of the component's dynamic child (``LoRAAdapterResource``)."""


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
    """One LoRAAdapter CR as a plain dynamic resource, its inputs as a dict (``INPUT_KEYS``).

    The component's child (``_component``), and the base of ``LoRAAdapter``.
    """

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


class AdapterOutputs:
    """The outputs both shapes of ``LoRAAdapter`` expose, as annotations only.

    The component-provider host reads them through the component's base classes to build the
    schema. The Pulumi SDK reads a custom resource's own annotations only (and would convert the
    outputs to them: it cannot make a TypedDict), so on ``LoRAAdapter`` they serve type
    checkers alone.
    """

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


class LoRAAdapter(LoRAAdapterResource, AdapterOutputs, module="lora", name="LoRAAdapter"):
    """One LLMKube LoRAAdapter CR, its adapter loaded on every Ready pod of the target.

    Outputs: every input, as the provider checked it, and what the cluster reports
    (``conditions``, ``pods``, ``loaded`` and the rest of ``OUTPUT_KEYS``).
    """

    if TYPE_CHECKING:  # for type checkers only: the SDK would convert outputs to annotated types
        inference_service: pulumi.Output[str]
        cr_uid: pulumi.Output[str]
        generation: pulumi.Output[int]

    def __init__(
        self, name: str, args: LoRAAdapterArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        moved = pulumi.ResourceOptions(aliases=[component_child_alias(name, opts)])
        super().__init__(
            name,
            {k: args.get(k) for k in INPUT_KEYS},
            pulumi.ResourceOptions.merge(opts, moved),
        )


def component_child_alias(name: str, opts: Optional[pulumi.ResourceOptions]) -> pulumi.Alias:
    """The URN this adapter had as the dynamic child of a ``LoRAAdapter`` component.

    The component had the adapter's name and parent; its child had the same name and the plain
    dynamic type. Naming that child as an alias makes the engine carry its state (the CR, the
    loads) over to this resource, and delete only the component, which has no provider.
    """
    component = pulumi.create_urn(name, TYPE_TOKEN, parent=opts.parent if opts else None)
    return pulumi.Alias(type_=DYNAMIC_TYPE, parent=component)
