from __future__ import annotations

from pathlib import Path

from scripts.gen_openapi import render

ROOT = Path(__file__).resolve().parent.parent


def test_committed_openapi_matches_the_app() -> None:
    committed = (ROOT / "openapi" / "openapi.json").read_text()
    assert committed == render(), "openapi/ drifted: run `python scripts/gen_openapi.py`"


def test_every_error_response_uses_the_error_shape() -> None:
    import json

    doc = json.loads(render())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for code, resp in op.get("responses", {}).items():
                if code.startswith(("4", "5")):
                    schema = resp.get("content", {}).get("application/json", {}).get("schema")
                    if schema is not None:
                        assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (
                            path, method, code)
