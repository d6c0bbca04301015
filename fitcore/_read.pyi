from collections.abc import Callable
from typing import Any

class Schema:
    def __init__(self, shapes: dict[str, tuple[str, str]], leaves: dict[str, frozenset[str]],
                 fields: dict[str, dict[str, tuple[str, str, frozenset[str] | None]]],
                 shape_of: Callable[[str], tuple[str, str]],
                 leaves_of: Callable[[str], frozenset[str]],
                 fields_of: Callable[[str], dict[str, tuple[str, str, frozenset[str] | None]]],
                 render: Callable[[Any], str]) -> None: ...
    def unknown_fields(self, obj: Any, model: str, path: Any = "") -> list[str]: ...

class DeviceReader:
    def __init__(self, names: set[str], attribute_names: set[str],
                 name_ok: Callable[[str], bool], attribute_ok: Callable[[Any], bool],
                 rest_of: Callable[[dict[str, Any]], dict[str, Any] | None],
                 parse_version: Callable[[str], Any], device_type: type) -> None: ...
    def read(self, devices: list[Any]) -> list[Any]: ...
