"""The pure half of `status` and `doctor`: every verdict and every check, without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import ValidationError

from pulumi_lora._core._llmkube import PodEndpoint, container_port, service_port
from pulumi_lora._core._topology import has_flag, normalize_args, partial_reach, refusal
from pulumi_lora._errors import Unauthorized, UnsupportedServer
from pulumi_lora._lifecycle import PodReport
from pulumi_lora._models import Transport
from pulumi_lora._ops._doctor import (
    CheckStatus,
    DoctorFacts,
    ServerProbe,
    check_pods,
    check_server,
    diagnose,
    parse_version,
)
from pulumi_lora._ops._spec import (
    check_adapter_volumes,
    check_data_parallel,
    check_enable_lora,
    check_lora_pool,
    check_ports,
    check_reach,
    check_runtime,
)
from pulumi_lora._ops._status import (
    AdapterVerdict,
    ServedState,
    StatusReport,
    adapter_line,
    args_from_cr,
    pod_line,
)

GOOD_ARGS = ["--enable-lora", "--max-lora-rank", "64", "--lora-target-modules", "all"]


def cr(
    *,
    path: str = "/adapters/sql",
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    ref: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "sql",
            "namespace": "models",
            "generation": generation,
            "annotations": annotations or {},
        },
        "spec": {
            "name": "sql-lora",
            "path": path,
            "inferenceServiceRef": ref or {"name": "llama"},
        },
        "status": status or {},
    }


def pod(name: str, *, ready: bool = True, state: str = "Running, Ready") -> PodEndpoint:
    return PodEndpoint(name, "models", f"uid-{name}", ready, "10.0.0.1", 30000, state)


def isvc(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "runtime": "sglang",
        "replicas": 2,
        "containerPort": 8080,
        "endpoint": {"port": 8080},
        "extraArgs": GOOD_ARGS,
        "extraVolumes": [{"name": "adapters", "persistentVolumeClaim": {"claimName": "a"}}],
        "extraVolumeMounts": [{"name": "adapters", "mountPath": "/adapters"}],
    }
    base.update(spec)
    return {"metadata": {"name": "llama", "namespace": "models"}, "spec": base}


# --- small parsers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5.15", (0, 5, 15)),
        ("0.5.5", (0, 5, 5)),
        ("v0.5.5.post1", (0, 5, 5)),
        ("0.5.6rc1", (0, 5, 6)),
        ("0.5", (0, 5, 0)),
        (" 1.0.0 ", (1, 0, 0)),
        ("dev", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_version(text: str | None, expected: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == expected


def test_extra_args_come_as_a_list_or_as_one_shell_string() -> None:
    assert normalize_args(["--enable-lora", "--max-lora-rank", "64"]) == [
        "--enable-lora",
        "--max-lora-rank",
        "64",
    ]
    assert normalize_args(["--enable-lora --lora-paths a=/x 'b=/y z'"]) == [
        "--enable-lora",
        "--lora-paths",
        "a=/x",
        "b=/y z",
    ]
    assert normalize_args([]) == []


def test_has_flag_takes_both_spellings_and_no_prefixes() -> None:
    assert has_flag(["--dp-size", "2"], "--dp-size")
    assert has_flag(["--dp-size=2"], "--dp-size")
    assert not has_flag(["--dp-size-extra"], "--dp-size")
    assert not has_flag([], "--enable-lora")


# --- doctor: one rule per check -----------------------------------------------------------------


def test_runtime() -> None:
    assert check_runtime({"runtime": "sglang"}).status is CheckStatus.OK
    vllm = check_runtime({"runtime": "vllm"})
    assert vllm.status is CheckStatus.FAIL
    assert "vllm" in vllm.message and vllm.fix == "set spec.runtime: sglang"
    unset = check_runtime({})
    assert unset.status is CheckStatus.FAIL
    assert "llamacpp" in unset.message and "default" in unset.message


def test_enable_lora() -> None:
    assert check_enable_lora(GOOD_ARGS, False).status is CheckStatus.OK
    missing = check_enable_lora(["--max-lora-rank", "8"], False)
    assert missing.status is CheckStatus.FAIL
    assert "LoRA is not enabled" in missing.message
    assert missing.fix == "add --enable-lora to spec.extraArgs"
    only_startup = check_enable_lora(["--lora-paths", "a=/a"], True)
    assert only_startup.status is CheckStatus.WARN
    assert "--enable-lora" in only_startup.fix


def test_lora_pool_from_flags_from_sglang_config_or_startup_adapters() -> None:
    ok = check_lora_pool(GOOD_ARGS, {}, False)
    assert ok.status is CheckStatus.OK and "64" in ok.message and "all" in ok.message
    equals = check_lora_pool(["--max-lora-rank=16", "--lora-target-modules=q_proj"], {}, False)
    assert equals.status is CheckStatus.OK and "16" in equals.message
    from_config = check_lora_pool(
        [], {"maxLoraRank": 32, "loraTargetModules": ["q_proj", "v_proj"]}, False
    )
    assert from_config.status is CheckStatus.OK and "q_proj v_proj" in from_config.message
    startup = check_lora_pool(["--lora-paths", "a=/a"], {}, True)
    assert startup.status is CheckStatus.OK and "--max-lora-rank" in startup.fix


def test_lora_pool_names_exactly_what_is_missing() -> None:
    both = check_lora_pool(["--enable-lora"], {}, False)
    assert both.status is CheckStatus.FAIL
    assert "--max-lora-rank or --lora-target-modules" in both.message
    assert "--max-lora-rank 64 --lora-target-modules all" in both.fix
    rank_only = check_lora_pool(["--enable-lora", "--max-lora-rank", "8"], {}, False)
    assert rank_only.status is CheckStatus.FAIL
    assert "no --lora-target-modules" in rank_only.message
    assert "--max-lora-rank:" not in rank_only.message


@pytest.mark.parametrize(
    ("args", "status"),
    [
        ([], CheckStatus.OK),
        (["--dp-size", "1"], CheckStatus.OK),
        (["--dp-size", "2"], CheckStatus.FAIL),
        (["--dp-size=4"], CheckStatus.FAIL),
        (["--data-parallel-size", "2"], CheckStatus.FAIL),
        (["--dp", "3"], CheckStatus.FAIL),
        (["--dp-size", "many"], CheckStatus.WARN),
    ],
)
def test_data_parallel(args: list[str], status: CheckStatus) -> None:
    check = check_data_parallel(args)
    assert check.status is status
    if status is CheckStatus.FAIL:
        assert "500" in check.message and "spec.replicas" in check.fix


def test_data_parallel_from_llmkubes_field_too() -> None:
    """LLMKube renders ``--dp N`` from ``sglangConfig.dataParallelSize`` (issue 54)."""
    check = check_data_parallel([], {"dataParallelSize": 2})
    assert check.status is CheckStatus.FAIL
    assert check.message.startswith("spec.sglangConfig.dataParallelSize 2: SGLang refuses")
    assert check_data_parallel([], {"dataParallelSize": 1}).status is CheckStatus.OK


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        ([], CheckStatus.OK, "one load reaches every request"),
        (["--tokenizer-worker-num", "1"], CheckStatus.OK, "one load reaches every request"),
        (
            ["--tokenizer-worker-num", "4"],
            CheckStatus.FAIL,
            "--tokenizer-worker-num 4: each of the 4 tokenizer workers keeps its own adapter "
            "registry",
        ),
        (["--tokenizer-worker-num=2"], CheckStatus.FAIL, "SGLang issue 31084"),
        (["--disaggregation-mode", "prefill"], CheckStatus.WARN, "prefill and a decode server"),
        (["--enable-dp-attention", "--tp", "4"], CheckStatus.OK, "one load reaches"),
    ],
)
def test_load_reach(args: list[str], status: CheckStatus, said: str) -> None:
    """Configurations where one runtime load cannot reach every request (issue 54, item 6)."""
    check = check_reach(args)
    assert check.status is status
    assert said in check.message
    if status is CheckStatus.FAIL:
        assert "drop --tokenizer-worker-num" in check.fix


def test_the_refusal_create_raises_names_each_cause_and_its_fix() -> None:
    why = refusal(["--tokenizer-worker-num", "2", "--disaggregation-mode", "decode"], None)
    assert why.startswith("--tokenizer-worker-num 2: each of the 2 tokenizer workers")
    assert "scale with spec.replicas" in why and "disaggregation" not in why  # a warning only
    assert refusal(["--enable-lora"], {"dataParallelSize": 1}) == ""
    assert [f.flag for f in partial_reach(["--dp", "2"], {"dataParallelSize": 3})] == ["--dp"]


def test_adapter_volumes() -> None:
    volume = [{"name": "a", "emptyDir": {}}]
    mount = [{"name": "a", "mountPath": "/adapters"}]
    both = check_adapter_volumes({"extraVolumes": volume, "extraVolumeMounts": mount})
    assert both.status is CheckStatus.OK and "/adapters" in both.message
    neither = check_adapter_volumes({})
    assert neither.status is CheckStatus.WARN
    assert "nothing mounts" in neither.message and "extraVolumeMounts" in neither.fix
    unmounted = check_adapter_volumes({"extraVolumes": volume})
    assert unmounted.status is CheckStatus.WARN
    dangling = check_adapter_volumes({"extraVolumeMounts": mount})
    assert dangling.status is CheckStatus.FAIL


def test_ports_follow_llmkube_defaults() -> None:
    assert container_port({}) == 30000
    assert service_port({}) == 8080
    assert container_port({"endpoint": {"port": 9000}}) == 9000
    assert service_port({"endpoint": {"port": 9000}}) == 9000
    assert container_port({"containerPort": 7000, "endpoint": {"port": 9000}}) == 7000


def test_port_mismatch_trap_is_flagged_and_explained() -> None:
    assert check_ports({"endpoint": {"port": 30000}}, None).status is CheckStatus.OK
    trap = check_ports({}, None)  # endpoint omitted: Service 8080, container 30000
    assert trap.status is CheckStatus.WARN
    assert "8080" in trap.message and "30000" in trap.message
    assert "each pod at its container port" in trap.message
    assert trap.fix == "set spec.endpoint.port: 30000 so both agree"
    live = check_ports({"endpoint": {"port": 30000}}, 80)  # the live Service disagrees
    assert live.status is CheckStatus.WARN and "live Service" in live.message


def test_pods() -> None:
    assert check_pods([], 2).status is CheckStatus.FAIL
    starting = check_pods([pod("a", ready=False, state="Pending, not Ready")], 1)
    assert starting.status is CheckStatus.FAIL and "a: Pending, not Ready" in starting.message
    partly = check_pods([pod("a"), pod("b", ready=False, state="Running, not Ready")], 2)
    assert partly.status is CheckStatus.WARN and "1/2" in partly.message
    short = check_pods([pod("a")], 3)
    assert short.status is CheckStatus.WARN and "1/3 desired" in short.message
    assert check_pods([pod("a"), pod("b")], 2).status is CheckStatus.OK


def test_server_ok_says_version_and_adapters() -> None:
    check = check_server(ServerProbe("a", True, "0.5.15", True, 3))
    assert check.status is CheckStatus.OK and check.pod == "a"
    assert check.message == "SGLang 0.5.15, LoRA enabled, 3 adapter(s) loaded"


def test_server_too_old_lora_off_unknown_unreachable() -> None:
    old = check_server(ServerProbe("a", True, "0.5.4", True, None))
    assert old.status is CheckStatus.FAIL and "0.5.5" in old.message and ">= 0.5.5" in old.fix
    off = check_server(ServerProbe("a", True, "0.5.15", False, 0))
    assert off.status is CheckStatus.FAIL and "--enable-lora" in off.fix
    unknown = check_server(ServerProbe("a", True, None, None, 0, info_error="HTTP 404"))
    assert unknown.status is CheckStatus.WARN and "HTTP 404" in unknown.message
    unsupported = check_server(
        ServerProbe("a", True, None, None, None, error="no parent", reason=UnsupportedServer.reason)
    )
    assert unsupported.status is CheckStatus.FAIL and "upgrade" in unsupported.fix
    gone = check_server(ServerProbe("a", False, error="connection refused", reason="X"))
    assert gone.status is CheckStatus.FAIL and "port named http" in gone.fix  # not the route
    no_route = check_server(ServerProbe("a", False, error="Network is unreachable", reason="X"))
    assert "--transport proxy" in no_route.fix
    via_proxy = check_server(ServerProbe("a", False, error="refused", reason="X"), "proxy")
    assert "--transport proxy" not in via_proxy.fix
    keyed = check_server(ServerProbe("a", False, error="401", reason=Unauthorized.reason))
    assert "--api-key-secret" in keyed.fix


def test_diagnose_a_healthy_inference_service() -> None:
    servers = (ServerProbe("a", True, "0.5.15", True, 1), ServerProbe("b", True, "0.5.15", True, 1))
    report = diagnose(DoctorFacts("models", "llama", isvc(), 8080, (pod("a"), pod("b")), servers))
    names = [c.name for c in report.checks]
    assert names == [
        "runtime",
        "enable-lora",
        "lora-pool",
        "data-parallel",
        "load-reach",
        "adapter-volumes",
        "ports",
        "pods",
        "sglang-server",
        "sglang-server",
    ]
    assert all(c.status is CheckStatus.OK for c in report.checks), report.checks
    assert report.ok and report.exit_code == 0
    assert [c.pod for c in report.checks[-2:]] == ["a", "b"]


def test_diagnose_reads_one_string_extra_args_and_startup_adapters() -> None:
    facts = DoctorFacts(
        "models",
        "llama",
        isvc(extraArgs=["--lora-paths sql=/adapters/sql --dp-size 2"]),
        None,
        (pod("a"),),
    )
    checks = {c.name: c for c in diagnose(facts).checks}
    assert checks["enable-lora"].status is CheckStatus.WARN  # on through --lora-paths only
    assert checks["lora-pool"].status is CheckStatus.OK
    assert checks["data-parallel"].status is CheckStatus.FAIL


def test_diagnose_a_broken_one_fails_with_fixes() -> None:
    facts = DoctorFacts("models", "llama", isvc(runtime="vllm", extraArgs=[]), None, ())
    report = diagnose(facts)
    failed = {c.name for c in report.checks if c.status is CheckStatus.FAIL}
    assert failed == {"runtime", "enable-lora", "lora-pool", "pods"}
    assert all(c.fix for c in report.checks if c.status is not CheckStatus.OK)
    assert report.exit_code == 1


def test_diagnose_a_missing_inference_service() -> None:
    report = diagnose(DoctorFacts("models", "ghost", None))
    assert [(c.name, c.status) for c in report.checks] == [("inference-service", CheckStatus.FAIL)]
    assert "models/ghost not found" in report.checks[0].message
    assert report.exit_code == 1


def test_doctor_json_shape() -> None:
    data = diagnose(DoctorFacts("models", "ghost", None)).to_json()
    assert set(data) == {"inference_service", "ok", "summary", "checks"}
    assert data["inference_service"] == {"namespace": "models", "name": "ghost"}
    assert data["summary"] == {"ok": 0, "warn": 0, "fail": 1}
    assert set(data["checks"][0]) == {"name", "status", "message", "fix", "pod"}


# --- status: a CR's verdict ---------------------------------------------------------------------


def test_args_from_cr_reads_the_project_annotations() -> None:
    annotations = {
        "pulumi-lora.dev/transport": "proxy",
        "pulumi-lora.dev/api-key-secret": "sglang-key/token",
    }
    args = args_from_cr(cr(annotations=annotations, ref={"name": "llama", "namespace": "gpu"}))
    assert (args.adapter_name, args.path, args.cr_name) == ("sql-lora", "/adapters/sql", "sql")
    assert (args.inference_service, args.target_namespace, args.namespace) == (
        "llama",
        "gpu",
        "models",
    )
    assert args.transport is Transport.PROXY
    assert (args.api_key_secret_name, args.api_key_secret_key) == ("sglang-key", "token")
    assert args_from_cr(cr(annotations=annotations), Transport.DIRECT).transport is Transport.DIRECT


def test_args_from_cr_defaults_for_a_foreign_cr() -> None:
    args = args_from_cr(cr())
    assert args.transport is Transport.DIRECT
    assert args.api_key_secret_name is None and args.api_key_secret_key == "api-key"
    with pytest.raises(ValidationError):
        args_from_cr(cr(path=""))


def report(name: str, **kw: Any) -> PodReport:
    values: dict[str, Any] = {"ready": True, "loaded": True, "path": "/adapters/sql"}
    values.update(kw)
    return PodReport(name, **values)


def test_pod_states() -> None:
    assert pod_line(report("a"), "/adapters/sql").state is ServedState.OK
    missing = pod_line(report("a", loaded=False, path=None), "/adapters/sql")
    assert missing.state is ServedState.MISSING and missing.error == "not loaded"
    wrong = pod_line(report("a", path="/adapters/old"), "/adapters/sql")
    assert wrong.state is ServedState.WRONG_PATH and "/adapters/old" in wrong.error
    unreachable = pod_line(report("a", loaded=False, error="refused"), "/adapters/sql")
    assert unreachable.state is ServedState.UNREACHABLE and unreachable.error == "refused"
    waiting = pod_line(report("a", ready=False, loaded=False), "/adapters/sql")
    assert waiting.state is ServedState.NOT_READY


def test_adapter_verdicts_from_pods() -> None:
    status = {"lastLoadedAt": "2026-12-01T12:00:00Z"}
    ok = adapter_line(cr(status=status), [report("a"), report("b", ready=False, loaded=False)])
    assert ok.verdict is AdapterVerdict.OK and ok.last_loaded_at == "2026-12-01T12:00:00Z"
    assert (ok.target_namespace, ok.target_name, ok.observed) == ("models", "llama", "pods")
    drift = adapter_line(cr(), [report("a"), report("b", loaded=False, path=None)])
    assert drift.verdict is AdapterVerdict.DRIFT and drift.error == "drift on 1/2 Ready pods"
    wrong = adapter_line(cr(), [report("a", path="/adapters/old")])
    assert wrong.verdict is AdapterVerdict.DRIFT
    unreachable = adapter_line(cr(), [report("a"), report("b", loaded=False, error="refused")])
    assert unreachable.verdict is AdapterVerdict.ERROR
    nowhere = adapter_line(cr(), [report("a", ready=False, loaded=False)])
    assert nowhere.verdict is AdapterVerdict.ERROR and "no Ready pods" in nowhere.error
    empty = adapter_line(cr(), [])
    assert empty.verdict is AdapterVerdict.ERROR and empty.error == "no pods found"
    failed = adapter_line(cr(), [], error="InferenceService models/llama not found")
    assert failed.verdict is AdapterVerdict.ERROR and "not found" in failed.error


def condition(status: str, generation: int, reason: str = "AdapterLoaded") -> dict[str, Any]:
    return {
        "type": "Loaded",
        "status": status,
        "reason": reason,
        "message": "loaded on 2/2 Ready pods",
        "lastTransitionTime": "2026-12-01T12:00:00Z",
        "observedGeneration": generation,
    }


def test_adapter_verdict_from_conditions_when_pods_are_not_observed() -> None:
    fresh = cr(generation=2, status={"conditions": [condition("True", 2)]})
    line = adapter_line(fresh, None, transport="delegated")
    assert (line.verdict, line.observed, line.transport) == (
        AdapterVerdict.OK,
        "conditions",
        "delegated",
    )
    stale = adapter_line(cr(generation=3, status={"conditions": [condition("True", 2)]}), None)
    assert stale.verdict is AdapterVerdict.DRIFT and "generation 2" in stale.error
    false = adapter_line(
        cr(status={"conditions": [condition("False", 1, "LoadUnsuccessful")]}), None
    )
    assert false.verdict is AdapterVerdict.DRIFT and "LoadUnsuccessful" in false.error
    none = adapter_line(cr(), None)
    assert none.verdict is AdapterVerdict.DRIFT and "re-sync loop" in none.error


def test_status_report_exit_code_and_json_shape() -> None:
    good = adapter_line(cr(), [report("a")])
    bad = adapter_line(cr(), [report("a", loaded=False, path=None)])
    assert StatusReport(()).exit_code == 0
    assert StatusReport((good,)).exit_code == 0
    mixed = StatusReport((good, bad))
    assert mixed.exit_code == 1
    data = mixed.to_json()
    assert set(data) == {"ok", "summary", "adapters", "held"}
    assert data["ok"] is False and data["held"] == []  # no pod held unready by the gate
    assert data["summary"] == {"adapters": 2, "ok": 1, "drift": 1, "error": 0, "deleting": 0}
    line = data["adapters"][1]
    assert set(line) == {
        "namespace",
        "name",
        "adapter",
        "path",
        "target",
        "transport",
        "observed",
        "verdict",
        "last_loaded_at",
        "error",
        "llmkube",
        "not_served_since",
        "capacity",
        "pods",
    }
    assert line["pods"] == [
        {
            "pod": "a",
            "ready": True,
            "state": "missing",
            "loaded": False,
            "path": None,
            "error": "not loaded",
            "gated": False,
        }
    ]


def test_diagnose_survives_a_malformed_lora_paths_item() -> None:
    facts = DoctorFacts("models", "llama", isvc(extraArgs=["--lora-paths", "{not json"]), None)
    checks = {c.name: c for c in diagnose(facts).checks}
    assert checks["enable-lora"].status is CheckStatus.WARN  # LoRA on through --lora-paths
