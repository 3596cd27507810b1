"""``StagingBatches``: the staged adapters one command creates on a claim share one Job."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from pulumi_lora._lifecycle import ProviderConfig, StagingBatches
from pulumi_lora._lifecycle._batch import Outcome, batch_group
from pulumi_lora._models import AdapterArgs
from pulumi_lora._staging._source import StagingRequest, content_key, declared_request

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = ProviderConfig(kubeconfig="/kube/config")
SCOPE = ("cluster", "adapters")


def args(name: str, **more: str) -> AdapterArgs:
    return AdapterArgs.parse(
        {
            "adapter_name": name,
            "source": f"hf://acme/{name}@{COMMIT}",
            "inference_service": "llama",
            "namespace": "models",
            **more,
        }
    )


def request_of(adapter: AdapterArgs) -> StagingRequest:
    return declared_request(adapter.to_dict())[0]


def group_of(adapter: AdapterArgs) -> tuple[object, ...]:
    return batch_group(adapter, CONFIG, declared_request(adapter.to_dict())[1])


class Runs:
    """A batch runner that records each batch and stages all but ``failing``."""

    def __init__(self, failing: frozenset[str] = frozenset()) -> None:
        self.batches: list[list[str]] = []
        self.failing = failing

    def __call__(self, requests: Sequence[StagingRequest]) -> dict[str, Outcome]:
        keys = [content_key(r) for r in requests]
        self.batches.append(sorted(keys))
        return {
            k: Outcome(False, reason="DigestMismatch") if k in self.failing else Outcome(True, 10)
            for k in keys
        }


@pytest.fixture
def batches() -> StagingBatches:
    return StagingBatches(quiet=0.0, settle_limit=0.0)


def test_with_nothing_declared_the_adapter_is_staged_alone(batches: StagingBatches) -> None:
    a = args("a")
    runs = Runs()
    assert batches.stage(SCOPE, group_of(a), request_of(a), runs) is None
    assert runs.batches == []


def test_the_first_create_stages_every_declared_adapter_in_one_job(
    batches: StagingBatches,
) -> None:
    a, b, c = args("a"), args("b"), args("c")
    for adapter in (a, b, c):
        batches.declare(adapter, CONFIG)
    runs = Runs()
    assert batches.stage(SCOPE, group_of(a), request_of(a), runs) == Outcome(True, 10)
    assert runs.batches == [sorted(content_key(request_of(x)) for x in (a, b, c))]
    assert batches.stage(SCOPE, group_of(b), request_of(b), runs) == Outcome(True, 10)
    assert batches.stage(SCOPE, group_of(c), request_of(c), runs) == Outcome(True, 10)
    assert len(runs.batches) == 1
    # an outcome is taken once: the next command stages afresh
    assert batches.stage(SCOPE, group_of(b), request_of(b), runs) is None


def test_adapters_of_another_claim_or_secret_are_not_batched(batches: StagingBatches) -> None:
    a = args("a")
    batches.declare(args("b", volume_claim="other"), CONFIG)
    batches.declare(args("c", source_secret_name="hub-token"), CONFIG)
    batches.declare(args("d", inference_service="mistral"), CONFIG)
    assert batches.stage(SCOPE, group_of(a), request_of(a), Runs()) is None


def test_a_create_arriving_during_the_batch_waits_for_it(batches: StagingBatches) -> None:
    a, b = args("a"), args("b")
    batches.declare(a, CONFIG)
    batches.declare(b, CONFIG)
    entered, release = threading.Event(), threading.Event()
    runs = Runs()

    def slow(requests: Sequence[StagingRequest]) -> dict[str, Outcome]:
        entered.set()
        assert release.wait(10)
        return runs(requests)

    got: dict[str, Outcome | None] = {}
    leader = threading.Thread(
        target=lambda: got.update(a=batches.stage(SCOPE, group_of(a), request_of(a), slow))
    )
    leader.start()
    assert entered.wait(10)
    follower = threading.Thread(
        target=lambda: got.update(b=batches.stage(SCOPE, group_of(b), request_of(b), slow))
    )
    follower.start()
    release.set()
    leader.join(10)
    follower.join(10)
    assert got == {"a": Outcome(True, 10), "b": Outcome(True, 10)}
    assert len(runs.batches) == 1


def test_a_failed_adapter_learns_why_and_the_others_are_staged(batches: StagingBatches) -> None:
    a, b = args("a"), args("b")
    batches.declare(a, CONFIG)
    batches.declare(b, CONFIG)
    runs = Runs(failing=frozenset({content_key(request_of(b))}))
    assert batches.stage(SCOPE, group_of(a), request_of(a), runs) == Outcome(True, 10)
    outcome = batches.stage(SCOPE, group_of(b), request_of(b), runs)
    assert outcome == Outcome(False, reason="DigestMismatch")


def test_a_job_that_fails_fails_every_adapter_waiting_on_it(batches: StagingBatches) -> None:
    a, b = args("a"), args("b")
    batches.declare(a, CONFIG)
    batches.declare(b, CONFIG)

    def broken(requests: Sequence[StagingRequest]) -> dict[str, Outcome]:
        raise RuntimeError("ErrImagePull")

    with pytest.raises(RuntimeError, match="ErrImagePull"):
        batches.stage(SCOPE, group_of(a), request_of(a), broken)
    # nothing is left in flight: b stages alone, for its own message
    assert batches.stage(SCOPE, group_of(b), request_of(b), Runs()) is None


def test_old_declarations_and_outcomes_expire() -> None:
    now = [0.0]
    batches = StagingBatches(max_age=60, quiet=0.0, settle_limit=0.0, clock=lambda: now[0])
    a, b = args("a"), args("b")
    batches.declare(b, CONFIG)
    now[0] = 61.0
    assert batches.stage(SCOPE, group_of(a), request_of(a), Runs()) is None


def test_a_removal_on_the_claim_forgets_its_outcomes(batches: StagingBatches) -> None:
    a, b = args("a"), args("b")
    batches.declare(a, CONFIG)
    batches.declare(b, CONFIG)
    batches.stage(SCOPE, group_of(a), request_of(a), Runs())
    batches.forget(SCOPE)
    assert batches.stage(SCOPE, group_of(b), request_of(b), Runs()) is None


def test_the_provider_check_declares_new_content_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``check`` of a staged adapter declares it; the same content as before (a no-op up)
    does not, nor does an adapter by path."""
    from pulumi_lora import _lifecycle  # noqa: PLC0415 - the provider's side
    from pulumi_lora._provider_calls import CALLS  # noqa: PLC0415

    declared: list[str] = []
    monkeypatch.setattr(
        _lifecycle.BATCHES, "declare", lambda a, _config: declared.append(a.adapter_name)
    )
    inputs = {"adapter_name": "x", "source": f"hf://acme/x@{COMMIT}"}
    inputs |= {"inference_service": "llama", "namespace": "models"}
    CALLS.check(CONFIG, dict(inputs), dict(inputs))
    CALLS.check(CONFIG, {}, {**inputs, "source": None, "path": "/adapters/x"})
    assert declared == []
    CALLS.check(CONFIG, {}, dict(inputs))
    CALLS.check(CONFIG, dict(inputs), {**inputs, "source": f"hf://acme/y@{COMMIT}"})
    assert declared == ["x", "x"]
