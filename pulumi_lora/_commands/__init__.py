"""The ``pulumi-lora`` command: every subcommand, and the options they share."""
