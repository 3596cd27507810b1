"""Write ``schema.json``: the schema this plugin serves, computed in-process exactly as the host
computes it (``ComponentProvider`` runs the SDK's analyzer and schema generator).

Run ``python provider/write_schema.py`` after changing ``LoRAAdapter`` or ``AdapterInputs``;
``tests/ops/test_provider.py`` fails while the committed file is stale. The same schema comes
from ``pulumi package get-schema ./provider`` where the ``pulumi-language-python`` host exists.
"""

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from pulumi.provider.experimental.component import ComponentProvider

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "schema.json"


def served_schema() -> dict[str, Any]:
    """The schema the plugin in this folder serves (its ``__main__`` loaded under another name)."""
    spec = importlib.util.spec_from_file_location("pulumi_lora_provider", HERE / "__main__.py")
    if spec is None or spec.loader is None:
        raise RuntimeError("provider/__main__.py is missing")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    version = sys.modules["pulumi_lora"].__version__
    provider = ComponentProvider(plugin.COMPONENTS, plugin.NAME, plugin.NAMESPACE, version)
    if provider.schema is None:
        raise RuntimeError("the component provider produced no schema")
    schema: dict[str, Any] = json.loads(provider.schema)
    return schema


def render(schema: dict[str, Any]) -> str:
    """The committed text: sorted keys, two-space indent, a final newline (stable diffs)."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(render(served_schema()), encoding="utf-8")
