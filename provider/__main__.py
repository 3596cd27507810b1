"""The Pulumi plugin that serves ``LoRAAdapter`` to every Pulumi language (TypeScript, Go, C#,
Java, YAML) as one custom resource, ``pulumi-lora:index:LoRAAdapter``.

The engine starts it as ``venv/bin/python <this folder> <engine address>``; the Python SDK's
provider server (``_pulumi._native.serve``) prints its port as the first line, so nothing may print
at import. Every call goes to ``pulumi_lora._pulumi._native.NativeProvider``, which hands it to the
same ``LoRAAdapterProvider`` Python programs use. The schema's package name is ``pulumi-lora``; the
namespace ``pulumilora`` keeps generated SDKs out of Pulumi's own scope and away from this project's
module name (``@pulumilora/pulumi-lora``, ``pulumilora_pulumi_lora``; never ``pulumi_lora``). See
README.md for how to use it, and ``write_schema.py`` for the committed ``schema.json``.
"""

import sys

from pulumi_lora import __version__
from pulumi_lora._pulumi._native import NativeProvider, engine_address, serve

if __name__ == "__main__":
    serve(__version__, NativeProvider(__version__, engine_address(sys.argv[1:])))
