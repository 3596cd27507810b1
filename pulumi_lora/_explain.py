"""What ``check`` says of a bad input: msgspec's errors in the words users read, and values
quoted only where they hold no credential. Pure."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, get_args, get_origin

#: Inputs whose values hold credentials: never quoted in a message, never in the state in clear
#: (the resource makes them secret whether or not the program did).
CREDENTIAL_INPUTS = frozenset({"kubeconfig"})


def quoted(name: str, value: Any) -> str:
    """Pure: an input and its value for a message; a credential's value is never shown."""
    if name in CREDENTIAL_INPUTS:
        return f"{name} (a {type(value).__name__}; its value is not shown: it holds credentials)"
    return f"{name} {value!r}"


_TYPE_WORDS = {"str": "a valid string", "bool": "a valid boolean", "float": "a valid number"}
_TYPE_WORDS |= {"int": "a valid integer", "object": "a valid dictionary"}
_BOUND_WORDS = {">": "greater than", ">=": "greater than or equal to", "<": "less than"}
_BOUND_WORDS |= {"<=": "less than or equal to"}


def explain(kind: Any, error: str) -> str:
    """Pure: msgspec's message for a value of type ``kind`` in the words ``check`` prints."""
    if found := re.fullmatch(r"Expected `str` matching regex '(.*)'", error):
        shown = re.sub(r"\\Z$", "$", found.group(1).replace("\\\\", "\\"))
        return f"String should match pattern '{shown}'"
    if found := re.fullmatch(r"Expected `str` of length ([<>])= (\d+)", error):
        count = int(found.group(2))
        bound = "at least" if found.group(1) == ">" else "at most"
        return f"String should have {bound} {count} character{'s' if count != 1 else ''}"
    if found := re.fullmatch(r"Expected `(?:float|int)` ([<>]=?) (\S+)", error):
        limit = float(found.group(2))
        return f"Input should be {_BOUND_WORDS[found.group(1)]} {limit:g}"
    if error.startswith("Invalid enum value") and (enum := _enum_of(kind)) is not None:
        names = [repr(member.value) for member in enum]
        return f"Input should be {', '.join(names[:-1])} or {names[-1]}"
    if found := re.fullmatch(r"Expected `(\w+)(?: \| null)?`, got `\w+`", error):
        return f"Input should be {_TYPE_WORDS.get(found.group(1), found.group(1))}"
    return error


def _enum_of(kind: Any) -> type[Enum] | None:
    """Pure: the Enum inside ``kind`` (through ``Optional`` and ``Annotated``), if any."""
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind
    if get_origin(kind) is not None:
        for arg in get_args(kind):
            if (enum := _enum_of(arg)) is not None:
                return enum
    return None
