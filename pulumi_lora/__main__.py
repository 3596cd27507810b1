"""``python -m pulumi_lora``: the same program as the ``pulumi-lora`` command."""

from pulumi_lora._commands._main import main

if __name__ == "__main__":
    main()
