"""Write ``schema.json``: the schema this plugin serves (``pulumi_lora._native.schema``, which
the SDK's analyzer infers from ``AdapterInputs`` and the outputs' annotations).

Run ``python provider/write_schema.py`` after changing ``AdapterInputs`` or the outputs;
``tests/ops/test_component_provider.py`` fails while the committed file is stale. The same
schema comes from ``pulumi package get-schema provider/pulumi-resource-pulumi-lora``.
"""

import json
from pathlib import Path
from typing import Any

from pulumi_lora import __version__
from pulumi_lora._native import schema

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "schema.json"


def served_schema() -> dict[str, Any]:
    """The schema the plugin in this folder serves."""
    return schema(__version__)


def render(served: dict[str, Any]) -> str:
    """The committed text: sorted keys, two-space indent, a final newline (stable diffs)."""
    return json.dumps(served, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(render(served_schema()), encoding="utf-8")
