"""docker-compose.yml and the Kubernetes manifests, checked statically (no engine here)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def _compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_defines_the_stack() -> None:
    services = _compose()["services"]
    assert {"api", "worker", "beat", "postgres", "redis", "minio", "registry"} <= set(services)


def test_compose_publishes_on_loopback_only() -> None:
    for name, svc in _compose()["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_compose_images_are_pinned() -> None:
    for name, svc in _compose()["services"].items():
        if "image" in svc:
            assert not svc["image"].endswith(":latest") and ":" in svc["image"], name


def test_compose_env_names_are_settings() -> None:
    fields = {f"FUTURE_TS_{f.upper()}" for f in Settings.model_fields}
    for name, svc in _compose()["services"].items():
        for key in (svc.get("environment") or {}):
            if key.startswith("FUTURE_TS_"):
                assert key in fields, (name, key)


def test_compose_production_env_passes_settings_validation() -> None:
    env = _compose()["services"]["api"]["environment"]
    values = {k.removeprefix("FUTURE_TS_").lower(): v for k, v in env.items()}
    import json

    values["registry_insecure_hosts"] = json.loads(values["registry_insecure_hosts"])
    Settings(**values)  # raises on placeholders or dev-only parts


def test_kubernetes_manifests() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/kubernetes/future-ts.yaml").read_text())
            if d]
    kinds = [d["kind"] for d in docs]
    assert {"Namespace", "Deployment", "Service", "NetworkPolicy", "ConfigMap"} <= set(kinds)
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        spec = d["spec"]["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False
        for c in spec["containers"]:
            assert re.search(r"@sha256:[0-9a-f]{64}$", c["image"]), c["image"]
            assert c["resources"]["limits"], c["name"]
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "egress" not in policy["spec"] and "ingress" not in policy["spec"]
