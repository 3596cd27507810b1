"""``python -m pulumi_lora._resync``: the ``resync`` command on its own (tests, debugging)."""

from pulumi_lora._resync._cli import resync_command

if __name__ == "__main__":
    resync_command()
