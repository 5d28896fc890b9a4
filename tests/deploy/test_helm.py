"""The Helm chart, rendered by Helm's own engine (helm-python-sdk) and checked three ways:
every manifest validates against the Kubernetes JSON schemas (kubernetes-validate, strict);
every render-service replica gets the same model, template, parser flags, stream-state key and
API key, and no per-workload value (env, *.extraEnv, gateway.extraArgs) can override them;
and the wiring (selectors, probes, HPA, PDB, checksums, gateway pools) points where it should.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from render_service.gateway.config import GatewayConfig

from ._tools import (
    CHART,
    VALUE_SETS,
    ci_values,
    manifests,
    of_kind,
    render,
    render_files,
    render_service_containers,
)

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas shipped.
K8S_VERSIONS = ("1.25.0", "1.37.0")
# Custom resources have no upstream schema; each is checked structurally below.
CUSTOM_KINDS = {"ServiceMonitor"}
EXPECTED_KINDS = {
    "default": {"ConfigMap", "Secret", "Deployment", "Service", "HorizontalPodAutoscaler",
                "PodDisruptionBudget"},
    "pd": {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
           "PodDisruptionBudget", "ServiceMonitor"},
    "sidecar": {"ConfigMap", "Secret", "Deployment", "Service"},
}


@pytest.fixture(scope="module", params=VALUE_SETS)
def value_set(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def rendered(value_set: str) -> list[dict[str, Any]]:
    return render(ci_values(value_set))


def pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def secret_refs(container: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Variable -> secretKeyRef of the container's env entries taken from a Secret."""
    return {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})}


def volume(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == name]
    return found


# -- Helm itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_helm_lint_reports_no_warning(value_set: str) -> None:
    report = helm_python.lint(str(CHART), ci_values(value_set), strict=True)
    assert report["errors"] == []
    # Severity 1 is INFO (e.g. "icon is recommended"); 2 WARNING, 3 ERROR.
    assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_rendered_by_the_real_helm_sdk() -> None:
    assert helm_python.helm_sdk_version().startswith("v4.")


# -- Kubernetes schemas ---------------------------------------------------------------------


@pytest.mark.parametrize("k8s_version", K8S_VERSIONS)
def test_every_manifest_matches_the_kubernetes_schema(
    value_set: str, rendered: list[dict[str, Any]], k8s_version: str
) -> None:
    assert {d["kind"] for d in rendered} == EXPECTED_KINDS[value_set]
    for doc in rendered:
        if doc["kind"] in CUSTOM_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, k8s_version, strict=True)
            continue
        kubernetes_validate.validate(doc, k8s_version, strict=True)


def test_schema_validation_can_fail() -> None:
    """Guards the check above: a typo'd field must be rejected in strict mode."""
    (deployment, *_) = of_kind(render({}), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


def test_servicemonitor_scrapes_the_render_and_gateway_services() -> None:
    docs = render(ci_values("pd"))
    (monitor,) = of_kind(docs, "ServiceMonitor")
    spec = monitor["spec"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert spec["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]
    assert spec["namespaceSelector"] == {"matchNames": ["llm"]}
    selected = [
        s for s in of_kind(docs, "Service")
        if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        and s["metadata"]["labels"]["app.kubernetes.io/component"]
        in spec["selector"]["matchExpressions"][0]["values"]
    ]
    assert sorted(s["metadata"]["name"] for s in selected) == ["rs-render-service", "rs-render-service-gateway"]
    assert all(p["name"] == "http" for s in selected for p in s["spec"]["ports"])


# -- One model, one template, one set of parsers, one key for every replica ------------------


def test_every_replica_shares_model_template_parsers_and_key(
    value_set: str, rendered: list[dict[str, Any]]
) -> None:
    (config_map,) = [c for c in of_kind(rendered, "ConfigMap") if c["metadata"]["name"] == "rs-render-service-config"]
    deployments = of_kind(rendered, "Deployment")
    containers = [(d, c) for d in deployments for c in render_service_containers(d)]
    expected = {"default": 1, "pd": 2, "sidecar": 1}[value_set]  # render / +gateway / sidecar
    assert len(containers) == expected

    wiring = set()
    for deployment, container in containers:
        assert container["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
        env = env_of(container)
        # Nothing per-container may override what the ConfigMap decides for all.
        assert not set(env) & set(config_map["data"])
        secret_volume = volume(deployment, "stream-state")["secret"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "stream-state"]
        (item,) = secret_volume["items"]
        assert env["RENDER_SERVICE_STREAM_STATE_SECRET_FILE"] == f"{mount['mountPath']}/{item['path']}"
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        wiring.add((
            secret_volume["secretName"], item["key"], env["RENDER_SERVICE_STREAM_STATE_SECRET_FILE"],
            annotations["checksum/config"], annotations["checksum/stream-state"],
            json.dumps([v for v in pod_spec(deployment)["volumes"] if v["name"] == "model"]),
            json.dumps(secret_refs(container).get("RENDER_SERVICE_API_KEY")),
        ))
    assert len(wiring) == 1, wiring
    (shared,) = wiring
    expected_api_key = {"name": "llm-render-api-key", "key": "key"} if value_set == "pd" else None
    assert json.loads(shared[-1]) == expected_api_key


def test_configmap_holds_every_model_and_parser_flag() -> None:
    (config_map, *_) = of_kind(render(ci_values("pd")), "ConfigMap")
    assert config_map["data"] == {
        "RENDER_SERVICE_MODEL": "/models/Qwen3-8B",
        "RENDER_SERVICE_SERVED_MODEL_NAME": "qwen3-8b Qwen/Qwen3-8B",
        "RENDER_SERVICE_MAX_MODEL_LEN": "32768",
        "RENDER_SERVICE_REASONING_PARSER": "qwen3",
        "RENDER_SERVICE_TOOL_CALL_PARSER": "hermes",
        "RENDER_SERVICE_ENABLE_AUTO_TOOL_CHOICE": "true",
        "RENDER_SERVICE_DEFAULT_CHAT_TEMPLATE_KWARGS": '{"enable_thinking":true}',
        "RENDER_SERVICE_REASONING_EFFORT_MAP": '{"low":"minimal"}',
        "RENDER_SERVICE_MAX_BODY_BYTES": "33554432",
        "RENDER_SERVICE_RENDER_TIMEOUT": "30.5",
    }


def test_default_values_leave_the_embedded_model_and_its_parsers_alone() -> None:
    (config_map,) = of_kind(render({}), "ConfigMap")
    assert config_map["data"] == {}


def test_the_cli_reads_the_configmap_as_its_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's env names are the CLI's: parse `serve` with the ConfigMap as environment."""
    from render_service import cli

    docs = render(ci_values("pd"))
    (config_map, *_) = of_kind(docs, "ConfigMap")
    (deployment,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "rs-render-service"]
    (container,) = render_service_containers(deployment)
    for name in [n for n in os.environ if n.startswith("RENDER_SERVICE_")]:
        monkeypatch.delenv(name)
    # The API key comes from its Secret (llm-render-api-key, managed outside the chart).
    assert secret_refs(container) == {"RENDER_SERVICE_API_KEY": {"name": "llm-render-api-key", "key": "key"}}
    env = {**env_of(container), "RENDER_SERVICE_API_KEY": "key-from-the-secret"}
    for name, value in {**config_map["data"], **env}.items():
        monkeypatch.setenv(name, value)
    args = cli.build_parser().parse_args(container["args"])
    assert args.api_key == ["key-from-the-secret"]
    assert args.command == "serve"
    assert args.model == "/models/Qwen3-8B"
    assert (args.reasoning_parser, args.tool_call_parser) == ("qwen3", "hermes")
    assert args.enable_auto_tool_choice is True
    assert args.max_model_len == 32768
    assert json.loads(args.default_chat_template_kwargs) == {"enable_thinking": True}
    assert json.loads(args.reasoning_effort_map) == {"low": "minimal"}
    assert (args.max_body_bytes, args.render_timeout) == (33554432, 30.5)
    assert (args.host, args.port, args.workers, args.renderer_num_workers) == ("0.0.0.0", 8000, 2, 2)
    assert args.stream_state_secret_file == "/etc/render-service/stream-state/key"


# -- The stream-state Secret ----------------------------------------------------------------


def test_generated_key_is_one_secret_long_enough_and_checksummed() -> None:
    files = render_files({})
    docs = manifests(files)
    (secret,) = of_kind(docs, "Secret")
    key = base64.b64decode(secret["data"]["stream-state-secret"]).decode()
    assert len(key) >= 16 and key.isalnum()
    digest = hashlib.sha256(files["render-service/templates/secret.yaml"].encode()).hexdigest()
    config_digest = hashlib.sha256(files["render-service/templates/configmap.yaml"].encode()).hexdigest()
    for deployment in of_kind(docs, "Deployment"):
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["checksum/stream-state"] == digest
        assert annotations["checksum/config"] == config_digest
        assert volume(deployment, "stream-state")["secret"]["secretName"] == secret["metadata"]["name"]


def test_without_a_cluster_each_render_generates_a_new_key() -> None:
    """The documented trade-off: offline renders (helm template, Argo CD) cannot `lookup` the
    live key, so they make a new one; existingSecret or streamState.secret avoid that."""
    first, second = (of_kind(render({}), "Secret")[0]["data"] for _ in range(2))
    assert first != second
    pinned = {"streamState": {"secret": "0123456789abcdef-pinned"}}
    assert of_kind(render(pinned), "Secret")[0]["data"] == of_kind(render(pinned), "Secret")[0]["data"]


def test_existing_secret_is_referenced_not_created() -> None:
    docs = render(ci_values("pd"))
    assert of_kind(docs, "Secret") == []
    for deployment in of_kind(docs, "Deployment"):
        assert volume(deployment, "stream-state")["secret"]["secretName"] == "llm-stream-state"
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["render-service/stream-state-secret"] == "llm-stream-state/key"


def test_a_key_shorter_than_the_cli_accepts_is_refused() -> None:
    with pytest.raises(helm_python.HelmError, match="at least 16 characters"):
        render({"streamState": {"secret": "too-short"}})


# -- The API key: one Secret, never the ConfigMap -------------------------------------------

EVERY_WORKLOAD = {  # render tier + gateway + sidecar in one release
    "gateway": {"enabled": True, "pools": {"engines": {"urls": ["http://e0:8000"]}}},
    "sidecar": {"enabled": True, "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.33.0"}]},
}


def render_service_pairs(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(d, c) for d in of_kind(docs, "Deployment") for c in render_service_containers(d)]


def test_api_key_reaches_every_replica_from_one_secret_and_no_configmap() -> None:
    key = "sk-render-0123456789"
    files = render_files({**EVERY_WORKLOAD, "apiKey": {"value": key}})
    docs = manifests(files)
    (secret,) = [s for s in of_kind(docs, "Secret") if s["metadata"]["name"] == "rs-render-service-api-key"]
    assert base64.b64decode(secret["data"]["api-key"]).decode() == key
    for config_map in of_kind(docs, "ConfigMap"):
        text = json.dumps(config_map)
        assert key not in text and base64.b64encode(key.encode()).decode() not in text
        assert "RENDER_SERVICE_API_KEY" not in text
    pairs = render_service_pairs(docs)
    assert sorted(c["name"] for _, c in pairs) == ["gateway", "render", "render"]
    digest = hashlib.sha256(files["render-service/templates/api-key-secret.yaml"].encode()).hexdigest()
    for deployment, container in pairs:
        assert secret_refs(container)["RENDER_SERVICE_API_KEY"] == {"name": "rs-render-service-api-key",
                                                                   "key": "api-key"}
        assert "RENDER_SERVICE_API_KEY" not in {n for n, v in env_of(container).items() if v is not None}
        # A new key rolls every replica: env from a Secret is read only at container start.
        assert deployment["spec"]["template"]["metadata"]["annotations"]["checksum/api-key"] == digest
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_several_api_keys_are_stored_as_the_cli_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from render_service import cli

    docs = render({"apiKey": {"value": ["sk-first", "sk-second"]}})
    (secret,) = [s for s in of_kind(docs, "Secret") if s["metadata"]["name"].endswith("-api-key")]
    monkeypatch.setenv("RENDER_SERVICE_API_KEY", base64.b64decode(secret["data"]["api-key"]).decode())
    assert cli.build_parser().parse_args(["serve"]).api_key == ["sk-first", "sk-second"]


def test_existing_api_key_secret_is_referenced_not_created() -> None:
    docs = render({**EVERY_WORKLOAD, "apiKey": {"existingSecret": "my-keys", "existingSecretKey": "render"}})
    assert [s["metadata"]["name"] for s in of_kind(docs, "Secret")] == ["rs-render-service-stream-state"]
    for deployment, container in render_service_pairs(docs):
        assert secret_refs(container)["RENDER_SERVICE_API_KEY"] == {"name": "my-keys", "key": "render"}
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["render-service/api-key-secret"] == "my-keys/render"


def test_no_api_key_by_default(value_set: str, rendered: list[dict[str, Any]]) -> None:
    expected = {"name": "llm-render-api-key", "key": "key"} if value_set == "pd" else None
    assert {value_set: [secret_refs(c).get("RENDER_SERVICE_API_KEY") for _, c in render_service_pairs(rendered)]} == {
        value_set: [expected] * len(render_service_pairs(rendered))}
    assert not [s for s in of_kind(rendered, "Secret") if s["metadata"]["name"].endswith("-api-key")]


@pytest.mark.parametrize(("values", "message"), [
    ({"config": {"apiKey": "sk-plain"}}, r"config\.apiKey \(RENDER_SERVICE_API_KEY\) does not belong in the shared ConfigMap"),
    ({"config": {"extra": {"apiKey": "sk-plain"}}}, r"config\.extra\.apiKey \(RENDER_SERVICE_API_KEY\)"),
    ({"config": {"extra": {"streamStateSecret": "0123456789abcdef"}}}, r"config\.extra\.streamStateSecret .*streamState\.existingSecret"),
    ({"config": {"extra": {"workers": 4}}}, r"config\.extra\.workers .*render\.workers"),
    ({"apiKey": {"existingSecret": "a", "value": "b"}}, "not both"),
])
def test_secrets_and_per_workload_flags_are_refused_in_the_configmap(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmError, match=message):
        render(values)


# -- No per-workload value may override what every replica shares ----------------------------

SPLIT_MESSAGE = "which every replica shares; set it there, not per workload"


def with_env(path: str, entries: list[dict[str, Any]], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Values with `entries` under `path` (env, render.extraEnv, gateway.extraEnv,
    sidecar.render.extraEnv), the workload that path belongs to switched on."""
    values = json.loads(json.dumps({**EVERY_WORKLOAD, **(base or {})}))
    node = values
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = entries
    if path == "render.extraEnv":
        values["render"]["enabled"] = True
    return values


ENV_PATHS = ("env", "render.extraEnv", "gateway.extraEnv", "sidecar.render.extraEnv")


@pytest.mark.parametrize(("path", "name", "source"), [
    ("render.extraEnv", "RENDER_SERVICE_MODEL", "config.model"),
    ("gateway.extraEnv", "RENDER_SERVICE_REASONING_PARSER", "config.reasoningParser"),
    ("sidecar.render.extraEnv", "RENDER_SERVICE_CHAT_TEMPLATE", "config.chatTemplate or chatTemplateContent"),
    ("env", "RENDER_SERVICE_TOOL_CALL_PARSER", "config.toolCallParser"),
    ("render.extraEnv", "MODEL", "config.model"),
    ("gateway.extraEnv", "RENDER_SERVICE_API_KEY", "apiKey.existingSecret or apiKey.value"),
    ("render.extraEnv", "RENDER_SERVICE_STREAM_STATE_SECRET", "streamState"),
    ("sidecar.render.extraEnv", "RENDER_SERVICE_STREAM_STATE_SECRET_FILE", "streamState"),
    ("env", "RENDER_SERVICE_MAX_BODY_BYTES", "config.extra.maxBodyBytes"),
])
def test_overriding_a_shared_variable_fails_the_render(path: str, name: str, source: str) -> None:
    base = {"config": {"extra": {"maxBodyBytes": 1048576}}}
    for entry in ({"name": name, "value": "per-workload"},
                  {"name": name, "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}):
        with pytest.raises(helm_python.HelmError) as caught:
            render(with_env(path, [{"name": "HF_HUB_OFFLINE", "value": "0"}, entry], base))
        assert f"{path}: {name} comes from {source} (the shared" in str(caught.value)
        assert SPLIT_MESSAGE in str(caught.value)


def test_every_variable_a_ci_configmap_holds_is_refused_everywhere(
    value_set: str, rendered: list[dict[str, Any]]
) -> None:
    (config_map,) = [c for c in of_kind(rendered, "ConfigMap") if c["metadata"]["name"] == "rs-render-service-config"]
    base = ci_values(value_set)
    for name in config_map["data"]:
        for path in ENV_PATHS:
            with pytest.raises(helm_python.HelmError, match=f"{path}: {name} comes from config"):
                render(with_env(path, [{"name": name, "value": "x"}], base))


def model_flag_dests() -> list[str]:
    """Every model, template, parser and image flag of `serve` and `gateway`: what must be the
    same on every replica."""
    from render_service import cli

    parser = argparse.ArgumentParser(add_help=False)
    cli._add_model_flags(parser)
    return [a.dest for a in parser._actions]


def test_every_model_and_parser_flag_of_the_cli_is_a_shared_config_key() -> None:
    """A flag missing from `config` would be neither in the ConfigMap nor reserved, so one
    workload could set it alone: each one has a config key whose variable is the CLI's own, and
    stays reserved when a user sets the key to null (which Helm turns into "no such key")."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    dests = model_flag_dests()
    assert "model" in dests and "reasoning_parser" in dests
    values = {}
    for dest in dests:
        head, *rest = dest.split("_")
        key = head + "".join(word.capitalize() for word in rest)
        assert key in defaults, f"values.yaml config has no {key} (the CLI's --{dest.replace('_', '-')})"
        values[key] = "x"
        override = [{"name": f"RENDER_SERVICE_{dest.upper()}", "value": "x"}]
        for base in ({}, {"config": {key: None}}):
            with pytest.raises(helm_python.HelmError, match=f"RENDER_SERVICE_{dest.upper()} comes from config.{key} "):
                render(with_env("render.extraEnv", override, base))
    (config_map, *_) = of_kind(render({"config": values}), "ConfigMap")
    assert set(config_map["data"]) == {f"RENDER_SERVICE_{d.upper()}" for d in dests}


def test_unrelated_extra_env_still_renders_and_validates() -> None:
    hf_token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    values = with_env("render.extraEnv", [hf_token, {"name": "RENDER_SERVICE_LOG_LEVEL", "value": "debug"}])
    values["env"] = [{"name": "HF_HUB_OFFLINE", "value": "0"}]
    values["gateway"]["extraEnv"] = [
        {"name": "RENDER_SERVICE_ENGINE_API_KEY", "valueFrom": {"secretKeyRef": {"name": "engine", "key": "k"}}}]
    values["gateway"]["extraArgs"] = ["--engine-api-key", "k", "--max-retries", "2"]
    values["sidecar"]["render"] = {"extraEnv": [{"name": "RENDER_SERVICE_MAX_IMAGES", "value": "2"}]}
    docs = render(values)
    by_workload = {d["metadata"]["name"]: env_of(c) for d, c in render_service_pairs(docs)}
    assert by_workload["rs-render-service"]["RENDER_SERVICE_LOG_LEVEL"] == "debug"
    assert "HF_TOKEN" in by_workload["rs-render-service"]
    assert "RENDER_SERVICE_ENGINE_API_KEY" in by_workload["rs-render-service-gateway"]
    (gateway, _) = gateway_parts(docs)
    assert render_service_containers(gateway)[0]["args"][-4:] == ["--engine-api-key", "k", "--max-retries", "2"]
    assert by_workload["rs-render-service-engine"]["RENDER_SERVICE_MAX_IMAGES"] == "2"
    assert all(env["HF_HUB_OFFLINE"] == "0" for env in by_workload.values())
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize(("args", "message"), [
    (["--reasoning-parser", "deepseek_r1"], "--reasoning-parser sets RENDER_SERVICE_REASONING_PARSER, which comes from config.reasoningParser"),
    (["--chat-template=/t.jinja"], "--chat-template=/t.jinja sets RENDER_SERVICE_CHAT_TEMPLATE"),
    (["--api-key", "sk"], "--api-key sets RENDER_SERVICE_API_KEY, which comes from apiKey"),
    (["--stream-state-secret-file", "/k"], "RENDER_SERVICE_STREAM_STATE_SECRET_FILE, which comes from streamState"),
    (["/models/other"], "a positional argument"),
])
def test_gateway_extra_args_cannot_override_shared_flags(args: list[str], message: str) -> None:
    with pytest.raises(helm_python.HelmError, match=message):
        render({"gateway": {**EVERY_WORKLOAD["gateway"], "extraArgs": args}})


# -- Workload wiring ------------------------------------------------------------------------


def test_hpa_pdb_and_service_target_the_render_pods() -> None:
    docs = render({})
    (deployment,) = of_kind(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    (container,) = render_service_containers(deployment)
    assert container["resources"]["requests"]["cpu"]  # utilization needs a request
    (pdb,) = of_kind(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (service,) = of_kind(docs, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    port_names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert (annotations["prometheus.io/scrape"], annotations["prometheus.io/path"]) == ("true", "/metrics")


def test_fixed_replicas_when_autoscaling_is_off() -> None:
    docs = render({"render": {"autoscaling": {"enabled": False}, "replicaCount": 3}})
    assert of_kind(docs, "HorizontalPodAutoscaler") == []
    assert of_kind(docs, "Deployment")[0]["spec"]["replicas"] == 3


def test_every_render_service_container_is_probed_on_health(value_set: str, rendered: list[dict[str, Any]]) -> None:
    """/health everywhere, except the gateway's readiness: /ready (503 until an engine is
    healthy; its /health only says the process is up, so liveness never restarts it for that)."""
    for deployment in of_kind(rendered, "Deployment"):
        gateway = deployment["metadata"]["name"].endswith("-gateway")
        for container in render_service_containers(deployment):
            (port,) = container["ports"]
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                spec = container[probe]
                path = "/ready" if gateway and probe == "readinessProbe" else "/health"
                if "httpGet" in spec:
                    assert spec["httpGet"] == {"path": path, "port": port["name"]}
                else:  # loopback-bound sidecar: the kubelet cannot reach it over the pod IP
                    assert env_of(container)["RENDER_SERVICE_HOST"] == "127.0.0.1"
                    command = spec["exec"]["command"]
                    assert command[:2] == ["python", "-c"]
                    assert f"http://127.0.0.1:{port['containerPort']}/health" in command[2]


def test_sidecar_runs_next_to_the_engine_on_loopback() -> None:
    docs = render(ci_values("sidecar"))
    (deployment,) = of_kind(docs, "Deployment")
    names = [c["name"] for c in pod_spec(deployment)["containers"]]
    assert names == ["vllm", "render"]
    (render_container,) = render_service_containers(deployment)
    env = env_of(render_container)
    assert (env["RENDER_SERVICE_HOST"], env["RENDER_SERVICE_PORT"]) == ("127.0.0.1", "8200")
    ports = [p for c in pod_spec(deployment)["containers"] for p in c.get("ports", [])]
    assert len({p["name"] for p in ports}) == len({p["containerPort"] for p in ports}) == len(ports)
    with pytest.raises(helm_python.HelmError, match="collides"):
        render({**ci_values("sidecar"), "sidecar": {**ci_values("sidecar")["sidecar"], "render": {"port": 8000}}})


# -- Gateway --------------------------------------------------------------------------------


def gateway_parts(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-gateway")]
    (config_map,) = [c for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-gateway")]
    return deployment, yaml.safe_load(config_map["data"]["gateway.yaml"])


def test_pd_gateway_gets_both_pools_with_their_routing() -> None:
    deployment, pools = gateway_parts(render(ci_values("pd")))
    assert pools == {
        "block_size": 16,
        "prefill": ["http://vllm-prefill-0.vllm-prefill.llm.svc:8000", "http://vllm-prefill-1.vllm-prefill.llm.svc:8000"],
        "prefill_routing": "prefix_aware",
        "decode": ["http://vllm-decode-0.vllm-decode.llm.svc:8000", "http://vllm-decode-1.vllm-decode.llm.svc:8000"],
        "decode_routing": "least_outstanding",
        "conversations": {"enabled": True, "max_conversations": 10000, "max_stored_tokens": 50000000,
                          "decoder_kv_blocks_ttl": 480.0, "ttl_margin_s": 10.0,
                          "kv_recompute_threshold": 64},
    }
    gateway = GatewayConfig.from_mapping(pools)  # the gateway itself accepts the rendered file
    assert len(gateway.prefill) == 2 and len(gateway.decode) == 2
    assert gateway.conversations.enabled and gateway.conversations.reuse_window_s == 470
    (container,) = render_service_containers(deployment)
    assert container["args"] == ["gateway", "--config", "/etc/render-service/gateway/gateway.yaml"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["gateway-config"] == "/etc/render-service/gateway"


def test_conversations_need_pd_pools() -> None:
    """Multi-turn P/D on a collocated gateway is refused at render time."""
    values = {"gateway": {"enabled": True, "pools": {"engines": {"urls": ["http://e0:8000"]}},
                          "conversations": {"enabled": True}}}
    with pytest.raises(Exception, match="needs prefill and decode pools"):
        render(values)


def test_collocated_gateway() -> None:
    values = {"gateway": {"enabled": True, "pools": {"engines": {"urls": ["http://e0:8000", "http://e1:8000"],
                                                                "routing": "round_robin"}}}}
    _, pools = gateway_parts(render(values))
    assert pools == {"block_size": 16, "engines": ["http://e0:8000", "http://e1:8000"], "routing": "round_robin"}
    assert len(GatewayConfig.from_mapping(pools).engines) == 2


@pytest.mark.parametrize(("pools", "message"), [
    ({"engines": {"urls": ["http://e"]}, "prefill": {"urls": ["http://p"]}}, "not both"),
    ({}, "needs gateway.pools"),
    ({"prefill": {"urls": ["http://p"]}}, "at least one URL each"),
    ({"engines": {"urls": ["http://e"], "routing": "random"}}, "routing must be one of"),
])
def test_gateway_pool_mistakes_fail_the_render(pools: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmError, match=message):
        render({"gateway": {"enabled": True, "pools": pools}})


# -- Inline chat template -------------------------------------------------------------------


def test_inline_chat_template_is_mounted_from_the_same_configmap() -> None:
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    docs = render({"chatTemplateContent": template})
    (config_map,) = of_kind(docs, "ConfigMap")
    # binaryData: envFrom reads only `data`, so the template never becomes an env variable.
    assert base64.b64decode(config_map["binaryData"]["chat_template.jinja"]).decode() == template
    (deployment,) = of_kind(docs, "Deployment")
    (container,) = render_service_containers(deployment)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env_of(container)["RENDER_SERVICE_CHAT_TEMPLATE"] == f"{mounts['chat-template']}/chat_template.jinja"
    assert volume(deployment, "chat-template")["configMap"]["name"] == config_map["metadata"]["name"]
    with pytest.raises(helm_python.HelmError, match="not both"):
        render({"chatTemplateContent": template, "config": {"chatTemplate": "/t.jinja"}})
