"""Benchmark: staged adapters on the testbed (issue 40), side by side in one run.

Two figures, each against what the user would otherwise pay:

* **stage an 80 MB adapter for 8 replicas** (``LoRAAdapterProvider.create``: the stager Job of
  the project's image under podman started, the fetch from a played Hugging Face Hub on
  loopback, verification, the rename, then the load on 8 pods) against the floor of one plain
  GET of the same bytes from the same Hub to disk. The Hub is asked for the weights **once**,
  whatever the replica count. Targets: one fetch; the staging itself (the stager's own seconds
  to fetch, verify and rename, from its result) / floor <= 1.3 (the issue's goal). Beside it,
  for information, the create's wall (the stager's start and the loads on 8 pods too), and the
  create of another 80 MB adapter once the stager runs (what each further one pays).
* **``pulumi up`` of 20 staged adapters on 4 pods** against the same 20 adapters by ``path``
  (already on the pods' volume), each on an InferenceService of its own, in one run. Target:
  staged / by path <= 1.5. The stager Jobs it started are counted: a command's staged adapters
  on one claim with one credential set share one (``_lifecycle._stager``). The same 20 from
  Pulumi YAML through the native plugin, at the engine's default ``--parallel`` and at 16.

Run: ``.venv/bin/python benchmarks/staged_up_benchmark.py`` (the provisioned tools and the
project's image: ``python3 tools/provision.py``; about 2 minutes).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
import pulumi
from pulumi import automation as auto

from pulumi_lora import LoRAAdapter, LoRAAdapterArgs
from pulumi_lora._lifecycle import STAGERS, ProviderConfig
from pulumi_lora._provider import LoRAAdapterProvider
from pulumi_lora.testing.engine import LocalEngine
from pulumi_lora.testing.hub import PlayedHub
from pulumi_lora.testing.peft import write_adapter
from pulumi_lora.testing.testbed import Testbed

PROVIDER = Path(__file__).resolve().parents[1] / "provider"
SIZE = 80 * 10**6
WEIGHTS = "adapter_model.safetensors"
FLEET = 20


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def big_adapter() -> dict[str, bytes]:
    config = json.dumps({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj", "v_proj"]})
    return {"adapter_config.json": config.encode(), WEIGHTS: os.urandom(SIZE)}


def floor(hub: PlayedHub, sha: str, work: Path) -> float:
    """The best of three plain GETs of the weights from the Hub's CDN to disk."""
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        url = f"{hub.endpoint}/cdn/{sha}"
        with httpx2.stream("GET", url) as answer, (work / "floor.bin").open("wb") as out:
            for chunk in answer.iter_bytes(1 << 20):
                out.write(chunk)
        runs.append(time.perf_counter() - started)
    return min(runs)


def stage_for_replicas(testbed: Testbed, hub: PlayedHub, work: Path) -> None:
    namespace = testbed.create_namespace("bench-stage")
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=8, adapter_claim="adapters"
    )
    handle.wait_ready(timeout=120)
    files, warm_files = big_adapter(), big_adapter()
    commit = hub.publish("acme/big", files, lfs=frozenset({WEIGHTS}))
    warm_commit = hub.publish("acme/big-2", warm_files, lfs=frozenset({WEIGHTS}))
    sha = hashlib.sha256(files[WEIGHTS]).hexdigest()
    plain = floor(hub, sha, work)
    before = len([r for r in hub.requests if r.path.startswith("/cdn/")])
    provider = LoRAAdapterProvider()
    provider._config = ProviderConfig(kubeconfig=str(testbed.kubeconfig_path))
    walls, stagings = [], []
    for name, repo, at in (("big", "acme/big", commit), ("big-2", "acme/big-2", warm_commit)):
        said = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stderr(said):
            made = provider.create(
                {
                    "adapter_name": name,
                    "source": f"hf://{repo}@{at}",
                    "source_endpoint": hub.endpoint,
                    "inference_service": "llama",
                    "namespace": namespace,
                }
            )
        walls.append(time.perf_counter() - started)
        sys.stderr.write(said.getvalue())
        stagings.append(float(re.findall(r"fetched, \d+ bytes in ([\d.]+) s", said.getvalue())[0]))
        if name == "big":
            fetches = len([r for r in hub.requests if r.path.startswith("/cdn/")]) - before
            path = (made.outs or {})["path"]
    STAGERS.close()
    served = handle.served()
    assert all(pod["big"] == path for pod in served.values()), served
    wall, warm = walls
    staging = min(stagings)
    print(f"  plain GET of the 80 MB from the Hub to disk (floor, best of 3)  {plain:8.2f} s")
    print(f"  staging in the stager (fetch, verify, rename; best of 2)        {staging:8.2f} s")
    print(f"  create: stager Job start, staging, load on 8 pods              {wall:8.2f} s")
    print(f"  create of another 80 MB adapter, the stager running            {warm:8.2f} s")
    print(f"  fetches of the weights for 8 replicas   {fetches:3d}    target 1        "
          f"{verdict(fetches == 1)}")  # fmt: skip
    ratio = staging / plain
    print(f"  staging / floor                         {ratio:6.2f}  target <= 1.30  "
          f"{verdict(ratio <= 1.3)}")  # fmt: skip
    print(
        f"  (information) create / floor {wall / plain:.2f}; the stager running {warm / plain:.2f}"
    )


def program_of(declared: dict[str, dict[str, Any]]) -> Any:
    def program() -> None:
        for name, args in declared.items():
            LoRAAdapter(name, LoRAAdapterArgs(**args))
        pulumi.export("n", len(declared))

    return program


def stager_jobs(said: str) -> int:
    """How many stager Jobs an ``up``'s output says it started."""
    return len(set(re.findall(r"stager Job [\w.-]+/(pulumi-lora-stager-\w+) started", said)))


def fleet_declared(
    testbed: Testbed, hub: PlayedHub, work: Path, kind: str
) -> dict[str, dict[str, Any]]:
    """An InferenceService of 4 pods of its own and ``FLEET`` adapters for it: by ``path``, or
    each from a Hub repository of its own (``staged``, ``yaml``)."""
    namespace = testbed.create_namespace(f"bench-{kind}")
    handle = testbed.deploy_inference_service(
        namespace, "llama", replicas=4, adapter_claim=None if kind == "path" else "adapters"
    )
    handle.wait_ready(timeout=120)
    declared: dict[str, dict[str, Any]] = {}
    for index in range(FLEET):
        name = f"a{index:02d}"
        base = {"adapter_name": name, "inference_service": "llama", "namespace": namespace}
        if kind == "path":
            declared[name] = {**base, "path": testbed.make_adapter(f"{kind}-{name}")}
            continue
        folder = work / "adapters" / f"{kind}-{name}"
        write_adapter(folder, seed=f"{kind}-{name}")
        files = {p.name: p.read_bytes() for p in folder.iterdir()}
        commit = hub.publish(f"acme/{kind}-{name}", files, lfs=frozenset({WEIGHTS}))
        source = {"source": f"hf://acme/{kind}-{name}@{commit}", "source_endpoint": hub.endpoint}
        declared[name] = {**base, **source}
    return declared


def yaml_up(
    testbed: Testbed, work: Path, declared: dict[str, dict[str, Any]], parallel: int | None
) -> str:
    """``pulumi up`` of ``declared`` from Pulumi YAML (the CLI, the YAML host and the native
    plugin in ``provider/``, as a user runs them); returns its output."""
    lines = ["name: staged-bench-yaml", "runtime: yaml", "packages:"]
    lines += [f"  pulumi-lora: {PROVIDER}", "resources:"]
    for name, args in declared.items():
        lines += [f"  {name}:", "    type: pulumi-lora:index:LoRAAdapter", "    properties:"]
        lines += [f"      {_camel(k)}: {json.dumps(v)}" for k, v in args.items()]
    folder = work / f"yaml-{parallel or 'default'}"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    engine = LocalEngine(
        work / f"yaml-engine-{parallel or 'default'}",
        extra_env={"PULUMI_PYTHON_CMD": sys.executable, "PULUMI_DISABLE_REGISTRY_RESOLVE": "true"},
    )
    runner = engine.project(folder)
    runner.pulumi("stack", "init", "bench")
    runner.pulumi("config", "set", "pulumi-lora:kubeconfig", str(testbed.kubeconfig_path))
    steps = ["--parallel", str(parallel)] if parallel else []
    return runner.pulumi("up", "--yes", "--skip-preview", *steps).stdout


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def fleet_up(testbed: Testbed, hub: PlayedHub, work: Path) -> None:
    engine = LocalEngine(work / "engine")
    walls: dict[str, float] = {}
    for kind in ("path", "staged", "yaml", "yaml-p16"):
        declared = fleet_declared(testbed, hub, work, kind)
        started = time.perf_counter()
        if kind.startswith("yaml"):
            said = yaml_up(testbed, work, declared, 16 if kind == "yaml-p16" else None)
        else:
            stack = engine.inline_stack("staged-bench", kind, program_of(declared))
            config = auto.ConfigValue(str(testbed.kubeconfig_path))
            stack.set_config("pulumi-lora:kubeconfig", config)
            said = stack.up().stdout
        walls[kind] = time.perf_counter() - started
        jobs = stager_jobs(said)
        how = {
            "path": "by path",
            "staged": "staged",
            "yaml": "staged, YAML",
            "yaml-p16": "YAML, -p 16",
        }[kind]
        print(f"  up, {FLEET} adapters {how:<13} on 4 pods             "
              f"{walls[kind]:8.2f} s" + (f"   ({jobs} stager Jobs)" if jobs else ""))  # fmt: skip
    for kind, host in (
        ("staged", "Python, the dynamic host"),
        ("yaml", "YAML, the plugin"),
        ("yaml-p16", "YAML, --parallel 16"),
    ):
        ratio = walls[kind] / walls["path"]
        print(f"  staged / by path ({host:<24})  {ratio:6.2f}  target <= 1.50  "
              f"{verdict(ratio <= 1.5)}")  # fmt: skip


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="staged-bench-"))
    with Testbed() as testbed, PlayedHub() as hub:
        testbed.expose_to_pods(hub.port)
        print("staging an 80 MB adapter for 8 replicas")
        stage_for_replicas(testbed, hub, work)
        print(f"pulumi up of {FLEET} adapters on 4 pods")
        fleet_up(testbed, hub, work)
        print(f"(load average {os.getloadavg()})")


if __name__ == "__main__":
    main()
