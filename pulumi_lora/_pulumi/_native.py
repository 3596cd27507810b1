"""``pulumi-lora:index:LoRAAdapter`` as one custom resource, for every Pulumi language.

Translates each call for ``LoRAAdapterProvider``; no logic of its own. No ``from __future__
import annotations``: the analyzer reads them at run time.
"""

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, TypeVar

import grpc  # type: ignore[import-untyped]
import pulumi
from msgspec import ValidationError
from pulumi.dynamic import Config, ConfigureRequest
from pulumi.provider.experimental import provider as rpc
from pulumi.provider.experimental.analyzer import Analyzer
from pulumi.provider.experimental.property_value import Computed, PropertyValue
from pulumi.provider.experimental.schema import generate_schema
from pulumi.provider.experimental.server import ProviderServicer
from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, provider_pb2_grpc

from pulumi_lora._args import AdapterArgs
from pulumi_lora._errors import PulumiLoRAError
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora._pulumi._drift import effective_inputs, report_drift
from pulumi_lora._pulumi._properties import CREATE_KEYS, INPUT_KEYS, OUTPUT_KEYS, UNKNOWN
from pulumi_lora._pulumi._resource import TYPE_TOKEN, AdapterInputs, AdapterOutputs
from pulumi_lora._pulumi._schema import SECRET_PROPERTIES, document

DEFAULT_READY_TIMEOUT = float(AdapterArgs.defaults()["ready_timeout_seconds"])
"""How long a resource waits for Ready pods unless it says otherwise (``AdapterArgs``)."""
NAME = "pulumi-lora"
"""The schema's package name: the first part of the type token ``pulumi-lora:index:LoRAAdapter``."""
NAMESPACE = "pulumilora"
"""Scope of generated SDKs (npm ``@pulumilora/pulumi-lora``, PyPI ``pulumilora_pulumi_lora``)."""
WORKERS = 16
"""Operations run at once (the engine sends up to its ``--parallel`` steps concurrently; the
dynamic provider host serves 4 at once)."""
QUICK_WORKERS = 4
"""Checks and diffs run at once, apart from the operations (see ``NativeProvider``)."""

T = TypeVar("T")


def camel(key: str) -> str:
    """Pure: ``adapter_name`` -> ``adapterName`` (the schema's spelling of a property)."""
    head, *rest = key.split("_")
    return head + "".join(part.capitalize() for part in rest)


CAMEL = {key: camel(key) for key in (*INPUT_KEYS, *OUTPUT_KEYS)}
"""Each property of the Python resource and its name in the schema."""
SNAKE = {name: key for key, name in CAMEL.items()}


class ResourceOutputs(AdapterOutputs):
    """Every output of the resource, as annotations (the schema's ``properties``): the inputs,
    echoed when not at their default, and what the cluster reports (``OUTPUT_KEYS``)."""

    inference_service: pulumi.Output[str]
    inference_service_namespace: pulumi.Output[Optional[str]]
    resource_name: pulumi.Output[Optional[str]]
    pinned: pulumi.Output[Optional[bool]]
    readiness_policy: pulumi.Output[Optional[str]]
    ready_timeout_seconds: pulumi.Output[Optional[float]]
    transport: pulumi.Output[Optional[str]]
    api_key_secret_name: pulumi.Output[Optional[str]]
    api_key_secret_key: pulumi.Output[Optional[str]]
    kube_context: pulumi.Output[Optional[str]]
    kubeconfig_path: pulumi.Output[Optional[str]]
    kubeconfig: pulumi.Output[Optional[str]]
    adopt: pulumi.Output[Optional[bool]]
    smoke_test: pulumi.Output[Optional[bool]]
    max_unavailable: pulumi.Output[Optional[int]]
    drain_seconds: pulumi.Output[Optional[float]]
    source: pulumi.Output[Optional[str]]
    digests: pulumi.Output[Optional[Mapping[str, str]]]
    allow_mutable: pulumi.Output[Optional[bool]]
    source_endpoint: pulumi.Output[Optional[str]]
    source_secret_name: pulumi.Output[Optional[str]]
    source_service_account: pulumi.Output[Optional[str]]
    source_public: pulumi.Output[Optional[bool]]
    volume_claim: pulumi.Output[Optional[str]]
    cr_uid: pulumi.Output[str]
    generation: pulumi.Output[int]


class LoRAAdapter(pulumi.ComponentResource, ResourceOutputs):
    """One LLMKube LoRAAdapter CR, its adapter loaded on every Ready pod of the target."""

    def __init__(
        self, name: str, args: AdapterInputs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        """Never made: the analyzer reads this signature and the annotations (see schema())."""
        raise TypeError("a schema declaration; use pulumi_lora.LoRAAdapter in Python programs")


def schema(version: str) -> dict[str, Any]:
    """The schema ``provider/`` serves: the analyzer's, for ``LoRAAdapter`` above, as a custom
    resource (no ``isComponent``). ``provider/schema.json`` is this, committed."""
    analyzer = Analyzer(NAME)
    found = analyzer.analyze([LoRAAdapter])
    made = generate_schema(
        NAME,
        version,
        NAMESPACE,
        found["component_definitions"],
        found["type_definitions"],
        sorted(found["dependencies"], key=lambda d: f"{d.name}{d.version}"),
    ).to_json()
    made["resources"][TYPE_TOKEN].pop("isComponent", None)
    undescribed = {
        camel(key): doc
        for base in LoRAAdapter.__mro__
        for key in getattr(base, "__annotations__", {})
        if (doc := analyzer.get_docstring(base, key))
    }
    return document(made, TYPE_TOKEN, undescribed)


# --- values ---------------------------------------------------------------------------------------


def plain(value: PropertyValue) -> Any:
    """Pure: a property value as the dynamic provider sees one: plaintext (secrets unwrapped),
    unknowns as the engine's placeholder, numbers as the engine sends them (floats)."""
    inner = value.value
    if isinstance(inner, Computed):
        return UNKNOWN
    if isinstance(inner, Mapping):
        return {k: plain(v) for k, v in inner.items()}
    if isinstance(inner, Sequence) and not isinstance(inner, str):
        return [plain(v) for v in inner]
    return inner


def wrapped(value: Any) -> PropertyValue:
    """Pure: a plain value (what the dynamic provider returns) as a property value."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return PropertyValue(value)
    if isinstance(value, int | float):
        return PropertyValue(float(value))
    if isinstance(value, Mapping):
        return PropertyValue({str(k): wrapped(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return PropertyValue([wrapped(v) for v in value])
    return PropertyValue(str(value))


def props_in(values: Mapping[str, PropertyValue]) -> dict[str, Any]:
    """Pure: the engine's camelCase properties as the Python resource's (unknown keys dropped)."""
    return {SNAKE[k]: plain(v) for k, v in values.items() if k in SNAKE}


def secret_keys(values: Mapping[str, PropertyValue]) -> frozenset[str]:
    """Pure: the (snake_case) properties that hold a secret anywhere inside."""
    return frozenset(SNAKE[k] for k, v in values.items() if k in SNAKE and v.contains_secret())


def props_out(values: Mapping[str, Any], secret: frozenset[str]) -> dict[str, PropertyValue]:
    """Pure: the Python resource's properties as the schema's; a property whose input was
    secret stays secret (``secret``), and a credential always is (``SECRET_PROPERTIES``, however
    the program gave it), so nothing secret reaches the state in plaintext."""
    return {
        CAMEL.get(k, k): wrapped(v).with_secret(k in secret or k in SECRET_PROPERTIES)
        for k, v in values.items()
        if v is not None
    }


def config_values(variables: Mapping[str, str]) -> dict[str, str]:
    """Pure: the engine's ``pulumi-lora:config:KEY`` variables as ``pulumi-lora:KEY`` (what
    ``LoRAAdapterProvider.configure`` reads: ``lifecycle.CONFIG_KEYS``)."""
    prefix = f"{NAME}:config:"
    return {f"{NAME}:{k[len(prefix) :]}": v for k, v in variables.items() if k.startswith(prefix)}


# --- the provider ---------------------------------------------------------------------------------


class EngineLog:
    """Lines for the user, through the engine's ``Log`` service: the engine hides a provider
    plugin's stderr (it shows it only when the plugin dies), so drift is said this way, as
    warnings attached to the resource whose operation found it (``about``: the URN of the
    operation running on this thread), so the CLI prints them under that resource.
    """

    def __init__(self, address: str) -> None:
        self._address = address
        self._stub: engine_pb2_grpc.EngineStub | None = None
        self._local = threading.local()

    @contextlib.contextmanager
    def about(self, urn: str) -> Iterator[None]:
        """Attach what this thread says meanwhile to the resource ``urn``."""
        self._local.urn = urn
        try:
            yield
        finally:
            self._local.urn = ""

    def __call__(self, text: str) -> None:
        if self._stub is None:
            self._stub = engine_pb2_grpc.EngineStub(grpc.insecure_channel(self._address))
        urn = getattr(self._local, "urn", "")
        try:
            for line in text.splitlines():
                said = engine_pb2.LogRequest(severity=engine_pb2.WARNING, message=line, urn=urn)
                self._stub.Log(said)
        except grpc.RpcError:  # words about drift never fail the operation that found it
            sys.stderr.write(text)


def within_timeout(props: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """Pure: ``props`` whose wait for Ready pods fits the engine's timeout for the operation
    (``customTimeouts``; 0 when none is set): ``ready_timeout_seconds`` (default 300) is cut
    down to it, so a create or update given 2 minutes fails in 2 minutes, with the provider's
    own words, instead of waiting out the resource's 5."""
    if timeout <= 0:
        return dict(props)
    wait = props.get("ready_timeout_seconds")
    ceiling = float(wait) if isinstance(wait, int | float) else DEFAULT_READY_TIMEOUT
    return {**props, "ready_timeout_seconds": min(ceiling, timeout)}


def as_declared(outs: Mapping[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: outputs with ``ready_timeout_seconds`` as the program declared it (not as cut down
    by :func:`within_timeout`), so the next diff sees no change the program did not make."""
    kept = {k: v for k, v in outs.items() if k != "ready_timeout_seconds"}
    if props.get("ready_timeout_seconds") is not None and "ready_timeout_seconds" in outs:
        kept["ready_timeout_seconds"] = props["ready_timeout_seconds"]
    return kept


def engine_address(argv: Sequence[str]) -> str:
    """Pure: the engine's address among the plugin's arguments (the first that is no flag)."""
    return next((a for a in argv if not a.startswith("-")), "")


class NativeProvider(rpc.Provider):
    """The engine's provider calls, each handed to ``LoRAAdapterProvider`` (see module doc).

    ``engine``: the engine's address, where drift is said (``EngineLog``); empty, it goes to
    stderr as the dynamic provider's does.
    """

    def __init__(self, version: str, engine: str = "") -> None:
        self._core = LoRAAdapterProvider()
        self._schema = json.dumps(schema(version))
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="lora")
        # The engine checks and diffs one resource at a time, between the operations it runs:
        # queued behind sixteen long creates, they would hold up the whole command (and keep
        # a command's staged adapters from being declared for one batch Job).
        self._quick = ThreadPoolExecutor(max_workers=QUICK_WORKERS, thread_name_prefix="lora-check")
        self._log: EngineLog | None = None
        if engine:
            self._log = EngineLog(engine)
            report_drift.write = self._log

    async def _run(self, fn: Callable[..., T], *args: Any, urn: str = "", quick: bool = False) -> T:
        def about() -> T:
            if self._log is None:
                return fn(*args)
            with self._log.about(urn):
                return fn(*args)

        pool = self._quick if quick else self._pool
        return await asyncio.get_running_loop().run_in_executor(pool, about)

    async def get_schema(self, request: rpc.GetSchemaRequest) -> rpc.GetSchemaResponse:
        return rpc.GetSchemaResponse(schema=self._schema)

    async def check_config(self, request: rpc.CheckRequest) -> rpc.CheckResponse:
        return rpc.CheckResponse(inputs=request.new_inputs)

    async def diff_config(self, request: rpc.DiffRequest) -> rpc.DiffResponse:
        """Config never replaces an adapter: a new kubeconfig, key or timeout applies to the next
        operation (replacing would unload and reload every adapter)."""
        old = {k: plain(v) for k, v in request.old_state.items()}
        new = {k: plain(v) for k, v in request.new_inputs.items()}
        return rpc.DiffResponse(changes=old != new, replaces=[])

    async def configure(self, request: rpc.ConfigureRequest) -> rpc.ConfigureResponse:
        raw = config_values(request.variables)
        self._core.configure(ConfigureRequest(Config(raw, NAME)))
        return rpc.ConfigureResponse(
            accept_secrets=True, supports_preview=False, accept_resources=True
        )

    async def check(self, request: rpc.CheckRequest) -> rpc.CheckResponse:
        news = props_in(request.new_inputs)
        found = await self._run(self._core.check, props_in(request.old_inputs), news, quick=True)
        failures = [
            rpc.CheckFailure(CAMEL.get(f.property, f.property), f.reason) for f in found.failures
        ]
        return rpc.CheckResponse(inputs=request.new_inputs, failures=failures)

    async def diff(self, request: rpc.DiffRequest) -> rpc.DiffResponse:
        """The dynamic provider's verdict, with the moved inputs named for the CLI
        (``[diff: ~path]``); drift alone names ``pods``, the output the update will change."""
        olds, news = props_in(request.old_state), props_in(request.new_inputs)
        found = await self._run(
            self._core.diff, request.resource_id, olds, news, urn=request.urn, quick=True
        )
        if not found.changes:
            return rpc.DiffResponse(changes=False)
        replaces = [CAMEL[k] for k in found.replaces or []]
        before, after = effective_inputs(olds), effective_inputs(news)
        moved = [
            CAMEL[k] for k in INPUT_KEYS if k not in CREATE_KEYS and before.get(k) != after.get(k)
        ]
        kind = rpc.PropertyDiffKind
        detailed = {
            name: rpc.PropertyDiff(
                kind.UPDATE_REPLACE if name in replaces else kind.UPDATE, input_diff=True
            )
            for name in moved
        } or {"pods": rpc.PropertyDiff(kind.UPDATE, input_diff=False)}
        return rpc.DiffResponse(
            changes=True,
            replaces=replaces,
            delete_before_replace=bool(found.delete_before_replace),
            diffs=list(detailed),
            detailed_diff=detailed,
        )

    async def create(self, request: rpc.CreateRequest) -> rpc.CreateResponse:
        props = props_in(request.properties)
        timed = within_timeout(props, request.timeout)
        made = await self._run(self._core.create, timed, urn=request.urn)
        outs = props_out(as_declared(made.outs or {}, props), secret_keys(request.properties))
        return rpc.CreateResponse(resource_id=made.id, properties=outs)

    async def read(self, request: rpc.ReadRequest) -> rpc.ReadResponse:
        props = props_in(request.properties) or props_in(request.inputs)
        found = await self._run(self._core.read, request.resource_id, props, urn=request.urn)
        if not found.id:
            return rpc.ReadResponse(resource_id="", properties={}, inputs={})
        secret = secret_keys(request.properties) | secret_keys(request.inputs)
        inputs = (
            request.inputs
            if found.inputs is None and request.inputs
            else props_out(found.inputs or {}, secret)
        )
        return rpc.ReadResponse(
            resource_id=found.id, properties=props_out(found.outs or {}, secret), inputs=inputs
        )

    async def update(self, request: rpc.UpdateRequest) -> rpc.UpdateResponse:
        news = props_in(request.news)
        timed = within_timeout(news, request.timeout)
        olds = props_in(request.olds)
        done = await self._run(self._core.update, request.resource_id, olds, timed, urn=request.urn)
        outs = as_declared(done.outs or {}, news)
        return rpc.UpdateResponse(properties=props_out(outs, secret_keys(request.news)))

    async def delete(self, request: rpc.DeleteRequest) -> None:
        await self._run(self._core.delete, request.resource_id, props_in(request.properties))


# --- the server -----------------------------------------------------------------------------------


class Servicer(ProviderServicer):
    """The SDK's servicer, saying this project's errors as they are: the SDK's own turns every
    failure into ``Unexpected <class 'Exception'>: ...`` with a Python stack appended; a
    ``PulumiLoRAError`` (or a failed check of inputs) is a message for the user, not a bug."""


def _said_plainly(name: str) -> Callable[..., Any]:
    base = getattr(ProviderServicer, name)

    async def method(self: Servicer, request: Any, context: Any) -> Any:
        try:
            return await base(self, request, context)
        except Exception as exc:
            cause = exc.__context__ if exc.__context__ is not None else exc
            if isinstance(cause, PulumiLoRAError | ValidationError):
                await context.abort(grpc.StatusCode.UNKNOWN, str(cause))
            raise

    method.__name__ = name
    return method


for _name in ("Check", "Diff", "Create", "Read", "Update", "Delete"):
    setattr(Servicer, _name, _said_plainly(_name))


def serve(version: str, served: NativeProvider) -> None:
    """Serve ``served`` as the engine expects of a plugin: a gRPC server on a free loopback
    port, the port printed as the first line of output (the SDK's ``main``, with ``Servicer``;
    the engine's address, the plugin's argument, went to ``served``: ``engine_address``)."""

    async def run() -> None:
        server = grpc.aio.server(options=_GRPC_CHANNEL_OPTIONS)
        servicer = Servicer([], version, served, engine_address="")
        provider_pb2_grpc.add_ResourceProviderServicer_to_server(servicer, server)
        port = server.add_insecure_port(address="127.0.0.1:0")
        await server.start()
        sys.stdout.buffer.write(f"{port}\n".encode())
        sys.stdout.buffer.flush()
        await server.wait_for_termination()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
