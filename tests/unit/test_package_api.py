"""The package's public names are exactly the intended ones, sorted, and all importable."""

from __future__ import annotations

import subprocess
import sys

import pulumi_lora

INTENDED = {
    "RESOURCE_TYPE",
    "TYPE_TOKEN",
    "AdapterNotLoaded",
    "ClusterError",
    "ConditionInfo",
    "ConfigurationError",
    "InferenceServiceNotFound",
    "LoRAAdapter",
    "LoRAAdapterArgs",
    "LoRAAdapterProvider",
    "LoRAAdapterResource",
    "NameCollision",
    "NoReadyPods",
    "PodStatus",
    "Policy",
    "PulumiLoRAError",
    "RuntimeMismatch",
    "SGLangError",
    "Transport",
    "TransportUnavailable",
    "__version__",
}


def test_public_names_are_exactly_the_intended_ones() -> None:
    assert set(pulumi_lora.__all__) == INTENDED
    assert len(pulumi_lora.__all__) == len(INTENDED)  # no duplicates (ruff's RUF022 sorts it)
    assert all(hasattr(pulumi_lora, name) for name in pulumi_lora.__all__)


def test_the_provider_keeps_its_pickled_import_path() -> None:
    # Stacks' state references the provider by module and class name: renaming breaks them.
    assert pulumi_lora.LoRAAdapterProvider.__module__ == "pulumi_lora._provider"
    assert pulumi_lora.TYPE_TOKEN == "pulumi-lora:index:LoRAAdapter"
    # Python stacks' resources are found and aliased by their type: renaming breaks them.
    assert pulumi_lora.RESOURCE_TYPE == "pulumi-python:dynamic/lora:LoRAAdapter"


def test_the_emulator_and_the_loop_do_not_import_the_pulumi_sdk() -> None:
    """Every testbed pod runs an emulator and every loop imports this package: neither needs the
    Pulumi SDK, which takes most of a second to import (public names load on first use)."""
    code = (
        "import sys, pulumi_lora.testing.emulator, pulumi_lora._resync._app\n"
        "print(sorted(m for m in sys.modules if m == 'pulumi' or m.startswith('pulumi.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def printed_words(code: str) -> list[str]:
    """The words ``code`` prints, run by a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.split()


def test_a_program_declaring_adapters_loads_none_of_the_providers_work() -> None:
    """A program pickles the provider by reference and never calls it: declaring adapters must
    not import the models, the lifecycle or the HTTP and Kubernetes clients (0.4 s of a
    nothing-to-do ``pulumi up``, issue 38); the provider process loads them at its first call."""
    code = (
        "import sys, pulumi.dynamic\n"
        "before = set(sys.modules)\n"
        "import pulumi_lora\n"
        "pulumi_lora.LoRAAdapter, pulumi_lora.LoRAAdapterArgs, pulumi_lora.LoRAAdapterProvider()\n"
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    loaded = printed_words(code)
    assert "pulumi_lora._provider" in loaded
    heavy = ("pydantic", "lightkube", "httpx2", "httpcore2", "pulumi_lora._lifecycle")
    heavy += ("pulumi_lora._pulumi._calls", "pulumi_lora._models", "pulumi_lora._kube._objects")
    assert [m for m in loaded if m.startswith(heavy)] == []


def test_the_provider_process_loads_no_pydantic() -> None:
    """The provider process imports its work before its first answer, on every command: pydantic
    was ~90 ms of the 217 ms that cost (issue 38); the models are msgspec structs."""
    code = (
        "import sys, pulumi.dynamic\n"
        "import pulumi_lora._pulumi._calls, pulumi_lora._pulumi._native\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = printed_words(code)
    assert "pulumi_lora._lifecycle" in loaded
    assert [m for m in loaded if m.startswith(("pydantic", "pydantic_core"))] == []


def test_the_first_call_pauses_the_collector_only_while_it_imports() -> None:
    """``_calls()`` imports with the cyclic GC paused and turns it back on; it freezes the heap
    only in the engine's provider process, never in another that imports the provider."""
    code = (
        "import gc\n"
        "import pulumi_lora._provider as p\n"
        "p._calls()\n"
        "print(gc.isenabled(), gc.get_freeze_count())"
    )
    assert printed_words(code) == ["True", "0"]


def test_a_provider_pickled_by_an_older_version_still_runs() -> None:
    """Stacks hold the provider pickled by the version that last wrote them: one pickled with a
    ``ProviderConfig`` in it (0.3.0 and earlier) keeps that config; a fresh one starts with none and
    takes the defaults, or what ``configure`` gives."""
    import dill  # noqa: PLC0415 - what pulumi.dynamic pickles with

    from pulumi_lora._kube._source import KubeSource  # noqa: PLC0415
    from pulumi_lora._lifecycle import ProviderConfig  # noqa: PLC0415
    from pulumi_lora._settings import ClientTimeouts  # noqa: PLC0415

    old = pulumi_lora.LoRAAdapterProvider()
    old._config = ProviderConfig(kube=KubeSource(context="prod"))
    assert dill.loads(dill.dumps(old)).config.kube.context == "prod"
    # As 0.3.0 and earlier pickled it: the kubeconfig and its context apart, no image yet.
    older = object.__new__(ProviderConfig)
    older.__dict__.update(
        kubeconfig="/kube/config", context="prod", api_key=None, timeouts=ClientTimeouts()
    )
    old._config = older
    config = dill.loads(dill.dumps(old)).config
    assert config == ProviderConfig(kube=KubeSource("/kube/config", "prod"))
    fresh = dill.loads(dill.dumps(pulumi_lora.LoRAAdapterProvider()))
    assert fresh.config == ProviderConfig()
    checked = fresh.check({}, {"adapter_name": "a", "path": "/adapters/a"})
    assert [f.property for f in checked.failures] == ["inference_service"]
