"""``python -m pulumi_lora.testing.emulator``: see ``main``."""

from pulumi_lora.testing.emulator._main import main

if __name__ == "__main__":
    raise SystemExit(main())
