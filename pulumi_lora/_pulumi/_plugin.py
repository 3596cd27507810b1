"""The provider plugin's entry point: ``python -m pulumi_lora._pulumi._plugin <engine address>``.

It serves ``pulumi-lora:index:LoRAAdapter`` (``_native``) and prints the port as its first line,
so nothing here may print at import.
"""

import sys
from collections.abc import Sequence

from pulumi_lora._pulumi._native import NativeProvider, engine_address, serve
from pulumi_lora._version import __version__


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the provider to the engine whose address is among ``argv`` (default: the process's
    arguments)."""
    args = sys.argv[1:] if argv is None else argv
    serve(__version__, NativeProvider(__version__, engine_address(args)))


if __name__ == "__main__":
    main()
