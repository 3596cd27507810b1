"""What the dynamic-provider host sends the engine when a provider call fails: our errors as
``ClassName: message`` (the advice included), anything else as its traceback."""

from __future__ import annotations

import traceback

from pulumi_lora._errors import AdapterNotLoaded
from pulumi_lora._pulumi._host_messages import HostTraceback, install


def test_our_errors_read_as_their_message_and_others_keep_their_traceback() -> None:
    host = HostTraceback(traceback)
    try:
        raise AdapterNotLoaded("sql-lora", "loaded on 0/2 Ready pods", "use transport 'proxy'")
    except AdapterNotLoaded:
        shown = host.format_exc()
    assert shown == (
        "AdapterNotLoaded: could not load adapter 'sql-lora': loaded on 0/2 Ready pods "
        "(use transport 'proxy')"
    )
    try:
        raise ValueError("a bug")
    except ValueError:
        shown = host.format_exc()
    assert shown.startswith("Traceback (most recent call last):")
    assert shown.endswith("ValueError: a bug\n")


def test_only_the_host_is_changed() -> None:
    assert install() is False  # pytest is not the dynamic-provider host
