"""Write openapi/openapi.json from the app (run after changing an endpoint or a schema)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def render() -> str:
    from app.main import create_app

    return json.dumps(create_app().openapi(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    target = ROOT / "openapi" / "openapi.json"
    target.write_text(render())
    print(f"wrote {target}")
