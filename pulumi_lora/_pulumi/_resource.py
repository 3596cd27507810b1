"""``LoRAAdapter``: one LLMKube LoRAAdapter CR as one Pulumi resource, for Python programs.

Its alias adopts the old component's child. No ``from __future__ import annotations``: the
schema analyzer reads these types at run time and supports neither string annotations nor Unions.
Output keys inside lists must be single words.
"""

import pickle
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NotRequired, Optional, TypedDict, Union, Unpack, overload

import pulumi
from pulumi.dynamic import Resource

from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi._properties import ECHOED, INPUT_KEYS, OUTPUT_KEYS

TYPE_TOKEN = "pulumi-lora:index:LoRAAdapter"  # noqa: S105 - a type token, not a password
"""The type other languages declare (``provider/``'s custom resource; the component's, up to
0.2, and Python's while ``LoRAAdapter`` was a component); fixed, since programs name it."""
RESOURCE_TYPE = "pulumi-python:dynamic/lora:LoRAAdapter"
"""The type of a Python program's ``LoRAAdapter`` (a dynamic resource with its own type)."""
DYNAMIC_TYPE = "pulumi-python:dynamic:Resource"
"""The type of the component's dynamic child (``LoRAAdapterResource``)."""


class AdapterInputs(TypedDict):
    """The declaration of one adapter on one InferenceService: every argument, typed.

    The one list of ``LoRAAdapter``'s arguments: ``LoRAAdapterArgs`` and the keyword form take
    these keys, and the schema ``provider/`` serves to other languages is read from them.
    """

    adapter_name: pulumi.Input[str]
    """``spec.name``: the SGLang handle quoted in requests (1-63 chars of ``[A-Za-z0-9._-]``)."""
    path: NotRequired[pulumi.Input[str]]
    """``spec.path``: the adapter directory (with adapter_config.json) in the sglang container,
    where it already is; or give ``source`` instead."""
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
    """``direct`` (pod IPs; default), ``proxy`` (pod proxy; no API key) or ``delegated``."""
    api_key_secret_name: NotRequired[pulumi.Input[str]]
    """A Secret in the InferenceService's namespace holding the SGLang API key."""
    api_key_secret_key: NotRequired[pulumi.Input[str]]
    """The key inside that Secret (default ``api-key``)."""
    kube_context: NotRequired[pulumi.Input[str]]
    """kubeconfig context for this resource (several clusters in one stack)."""
    kubeconfig_path: NotRequired[pulumi.Input[str]]
    """kubeconfig file for this resource (a path: the content never enters state)."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """A kubeconfig's content (YAML or JSON text, or the object itself, as pulumi-eks'
    ``cluster.kubeconfig`` is) or path for this resource, as pulumi-kubernetes' provider takes
    it; always secret in the state, whether or not the program marked it, and never quoted in
    a message. Before ``kubeconfigPath`` and the provider's config."""
    adopt: NotRequired[pulumi.Input[bool]]
    """Take over a CR of this name that already exists (made by kubectl or Helm) when its spec
    is what this resource declares; load only on pods that lack the adapter (default false)."""
    smoke_test: NotRequired[pulumi.Input[bool]]
    """After every load (create, swap, the re-sync loop's heal), one greedy token through the
    adapter (SGLang's ``/generate``); unless it answers a finite logprob the load fails in
    SGLang's words and the adapter is unloaded from that pod (default true)."""
    max_unavailable: NotRequired[pulumi.Input[int]]
    """How many pods a swap (a ``path`` or ``source`` change) takes out of rotation at once, on
    pods behind the readiness gate (``ResyncDeployment(readiness_gate=True)``); without the
    gate every pod swaps at once (default 1)."""
    drain_seconds: NotRequired[pulumi.Input[float]]
    """Seconds a gated pod waits, once its endpoint is not ready in any EndpointSlice of the
    Service, before it swaps: kube-proxy's and gateways' propagation (default 2)."""
    source: NotRequired[pulumi.Input[str]]
    """Where the weights live, staged by pulumi-lora onto the claim the pods mount (instead of
    ``path``): ``hf://ORG/REPO@COMMIT``, ``s3://BUCKET/PREFIX/`` or ``https://HOST/PATH/``."""
    digests: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]
    """File name → sha256 of each file to stage; checked before anything is loaded. Optional for
    ``hf://`` at a 40-hex commit; required for any other source unless ``allow_mutable``."""
    allow_mutable: NotRequired[pulumi.Input[bool]]
    """Stage a source whose content can change (a branch, a tag, a prefix) without digests."""
    source_endpoint: NotRequired[pulumi.Input[str]]
    """The Hub endpoint (a private mirror, as ``HF_ENDPOINT``) or the S3-compatible server;
    ``https``, or ``http`` only to a loopback or cluster-internal host."""
    source_secret_name: NotRequired[pulumi.Input[str]]
    """A Secret in the InferenceService's namespace (where the staging Job runs) holding
    ``HF_TOKEN``, or ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (and
    ``AWS_SESSION_TOKEN``); the provider never reads it."""
    source_service_account: NotRequired[pulumi.Input[str]]
    """The ServiceAccount (in the InferenceService's namespace) the staging Job runs as, for
    workload identity (EKS IRSA or Pod Identity, GKE Workload Identity) instead of static keys."""
    source_public: NotRequired[pulumi.Input[bool]]
    """The ``s3://`` source is a public bucket: fetch it without signing. Otherwise the stager
    signs with the Secret's keys or the ServiceAccount's workload identity (EKS IRSA or Pod
    Identity), and fails saying how to give credentials when it finds neither."""
    volume_claim: NotRequired[pulumi.Input[str]]
    """The PersistentVolumeClaim to stage onto; default: the one the target's SGLang container
    mounts."""


REQUIRED_INPUTS = tuple(sorted(AdapterInputs.__required_keys__, key=INPUT_KEYS.index))
"""The arguments every adapter must give (``AdapterInputs``' required keys)."""


def checked_inputs(inputs: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """``inputs`` as a plain dict, or a ``TypeError`` naming what is unknown or missing.

    A TypedDict checks nothing at run time: without this, a typo such as ``namespce=`` was
    dropped without a word and the CR landed in ``default``.
    """
    unknown = sorted(set(inputs) - set(INPUT_KEYS))
    if unknown:
        raise TypeError(
            f"{owner} got unknown argument(s) {', '.join(map(repr, unknown))}; "
            f"valid arguments: {', '.join(INPUT_KEYS)}"
        )
    missing = [repr(k) for k in REQUIRED_INPUTS if k not in inputs]
    if "path" not in inputs and "source" not in inputs:
        missing.append("'path' (or 'source')")
    if missing:
        raise TypeError(
            f"{owner} is missing required argument(s) {', '.join(missing)}; "
            f"required: {', '.join(REQUIRED_INPUTS)}, and path or source"
        )
    if "path" in inputs and "source" in inputs:
        raise TypeError(
            f"{owner} takes path (where the adapter already is) or source (where pulumi-lora "
            "stages it from), not both"
        )
    return dict(inputs)


class LoRAAdapterArgs(dict[str, Any]):
    """The arguments of one ``LoRAAdapter``, as keywords (the keys of ``AdapterInputs``).

    ``LoRAAdapterArgs(adapter_name=..., path=..., inference_service=..., namespace=...)`` is a
    dict of exactly the arguments given; an unknown or a missing required one is a
    ``TypeError`` that lists the valid ones.
    """

    def __init__(self, **kwargs: Unpack[AdapterInputs]) -> None:
        super().__init__(checked_inputs(kwargs, "LoRAAdapterArgs"))


class ConditionInfo(TypedDict):
    """One condition, pulumi-lora's verdict on what the pods serve (``since``: when its status
    last changed). ``message`` only when there is one; ``generation`` only when the condition is
    about another generation than the CR's current one."""

    type: str
    status: str
    reason: str
    since: str
    message: NotRequired[str]
    generation: NotRequired[int]


class PodStatus(TypedDict):
    """The adapter on one labelled pod of the target. ``ready`` only when the pod is not Ready
    (``false``); ``path`` only when the pod serves another path than the resource's; ``reason``
    and ``error`` only when reading or loading it failed."""

    pod: str
    loaded: bool
    ready: NotRequired[bool]
    path: NotRequired[str]
    reason: NotRequired[str]
    error: NotRequired[str]


class LoRAAdapterResource(Resource):
    """One LoRAAdapter CR as a plain dynamic resource, its inputs as a dict (``INPUT_KEYS``).

    The component's child (``_pulumi._component``), and the base of ``LoRAAdapter``.
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

    The schema analyzer reads them through the base classes of ``_pulumi._native``'s declaration
    (and of 0.2's component) to build the schema. The Pulumi SDK reads a custom resource's own
    annotations only (and would convert the outputs to them: it cannot make a TypedDict), so on
    ``LoRAAdapter`` they serve type checkers alone.
    """

    adapter_name: pulumi.Output[str]
    """``spec.name``: the SGLang handle quoted in requests."""
    path: pulumi.Output[str]
    """``spec.path``: the adapter directory in the sglang container."""
    namespace: pulumi.Output[str]
    """The CR's namespace."""
    cr_name: pulumi.Output[str]
    """The LoRAAdapter CR's name (``metadata.name``)."""
    loaded: pulumi.Output[bool]
    """Whether the adapter is loaded as the readiness policy asks (every Ready pod for
    ``AllReadyPods``, at least one for ``AnyReadyPod``)."""
    available: pulumi.Output[bool]
    """Whether at least one Ready pod serves the adapter (condition ``Available``)."""
    ready: pulumi.Output[bool]
    """Condition ``Ready``: loaded as the policy asks, at the declared path, with no error."""
    conditions: pulumi.Output[list[ConditionInfo]]
    """pulumi-lora's verdict on what the pods serve (``Available``, ``Loaded``, ``Error``,
    ``Ready``): written to the CR's status by ``up``, recomputed from every Ready pod's
    ``/v1/models`` at each refresh, never copied from the CR (for ``delegated``, the re-sync
    loop's verdict)."""
    pods: pulumi.Output[list[PodStatus]]
    """The adapter on each labelled pod of the target, read from its ``/v1/models``."""
    loaded_path: pulumi.Output[Optional[str]]
    """The path the pods serve, when one serves the adapter."""
    last_loaded_at: pulumi.Output[Optional[str]]
    """When pulumi-lora last loaded the adapter on a pod (RFC 3339)."""
    content_key: pulumi.Output[Optional[str]]
    """A staged adapter's content key: the name of its directory on the claim (16 hex)."""


class LoRAAdapter(LoRAAdapterResource, AdapterOutputs, module="lora", name="LoRAAdapter"):
    """One LLMKube LoRAAdapter CR, its adapter loaded on every Ready pod of the target.

    Outputs: every input, as the provider checked it, and what the cluster reports
    (``conditions``, ``pods``, ``loaded`` and the rest of ``OUTPUT_KEYS``).
    """

    if TYPE_CHECKING:  # for type checkers only: the SDK would convert outputs to annotated types
        inference_service: pulumi.Output[str]
        cr_uid: pulumi.Output[str]
        generation: pulumi.Output[int]

    @overload
    def __init__(
        self,
        name: str,
        args: Union[LoRAAdapterArgs, AdapterInputs],
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        name: str,
        opts: Optional[pulumi.ResourceOptions] = None,
        **kwargs: Unpack[AdapterInputs],
    ) -> None: ...

    def __init__(self, name: str, *args: Any, **kwargs: Any) -> None:
        """``LoRAAdapter(name, args, opts)`` or ``LoRAAdapter(name, opts, adapter_name=..., ...)``.

        As in Pulumi's own SDKs: an args object (``LoRAAdapterArgs``, or a dict of its keys) or
        the arguments as keywords, not both; ``opts`` positional or by keyword in either form.
        """
        inputs, opts = resource_args_opts(args, kwargs)
        moved = pulumi.ResourceOptions(aliases=[component_child_alias(name, opts)])
        # Only the inputs given, and those always echoed, are declared: the SDK makes an Output
        # with four futures per declared property, the largest part of a program's cost per
        # adapter; an unset input is never echoed, so ``__getattr__`` answers for it.
        declared = {
            k: inputs.get(k) for k in INPUT_KEYS if k in ECHOED or inputs.get(k) is not None
        }
        if declared.get("kubeconfig") is not None:  # a credential: secret in and out of state
            declared["kubeconfig"] = pulumi.Output.secret(declared["kubeconfig"])
            secret = pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig"])
            moved = pulumi.ResourceOptions.merge(moved, secret)
        super().__init__(name, declared, pulumi.ResourceOptions.merge(opts, moved))

    if not TYPE_CHECKING:  # at run time only: type checkers still catch a misspelt attribute

        def __getattr__(self, name: str) -> pulumi.Output[Any]:
            """An input left unset: the provider echoes nothing for it, so it is None (known)."""
            if name in INPUT_KEYS:
                return pulumi.Output.from_input(None)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def get(
        cls,
        resource_name: str,
        id: pulumi.Input[str],
        opts: Optional[pulumi.ResourceOptions] = None,
    ) -> "LoRAAdapter":
        """An adapter that exists, read by its ID ``NAMESPACE/NAME`` (the CR's), as in
        Pulumi's own SDKs: the engine reads it through the provider (the CR's declaration and
        every Ready pod's ``/v1/models``; nothing is loaded, unloaded or written) and the stack
        records it as read, not owned: ``pulumi destroy`` leaves the CR and its loads alone. A
        missing CR fails the ``up`` with the engine's "does not exist"."""
        adapter = cls.__new__(cls)
        read = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(id=id))
        # every input named (None, so sent as nothing): the SDK makes an attribute per property
        LoRAAdapterResource.__init__(adapter, resource_name, dict.fromkeys(INPUT_KEYS), read)
        return adapter


def resource_args_opts(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], Optional[pulumi.ResourceOptions]]:
    """Split ``LoRAAdapter``'s arguments after its name into (checked inputs, options)."""
    rest, given = list(args), dict(kwargs)
    inputs: Any = None
    if rest and not isinstance(rest[0], pulumi.ResourceOptions | None):
        inputs = rest.pop(0)
    elif "args" in given:
        inputs = given.pop("args")
    opts = rest.pop(0) if rest else given.pop("opts", None)
    if rest:
        raise TypeError(
            f"LoRAAdapter takes a name, an args object and options; got {len(args) + 1} "
            "positional arguments"
        )
    if opts is not None and not isinstance(opts, pulumi.ResourceOptions):
        raise TypeError(f"LoRAAdapter's opts must be pulumi.ResourceOptions, not {type(opts)}")
    if inputs is None:
        return checked_inputs(given, "LoRAAdapter"), opts
    if given:
        raise TypeError(
            "LoRAAdapter takes an args object or keyword arguments, not both; got args and "
            f"{', '.join(f'{k}=' for k in given)}"
        )
    if not isinstance(inputs, Mapping):
        raise TypeError(f"LoRAAdapter's args must be a LoRAAdapterArgs, not {type(inputs)}")
    return checked_inputs(inputs, "LoRAAdapter"), opts


def component_child_alias(name: str, opts: Optional[pulumi.ResourceOptions]) -> pulumi.Alias:
    """The URN this adapter had as the dynamic child of a ``LoRAAdapter`` component.

    The component had the adapter's name and parent; its child had the same name and the plain
    dynamic type. Naming that child as an alias makes the engine carry its state (the CR, the
    loads) over to this resource, and delete only the component, which has no provider.
    """
    component = pulumi.create_urn(name, TYPE_TOKEN, parent=opts.parent if opts else None)
    return pulumi.Alias(type_=DYNAMIC_TYPE, parent=component)
