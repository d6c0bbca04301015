from collections.abc import Callable
from typing import Any

class Builder:
    def __init__(self, resolve: Callable[[str], Any], key_of: Callable[[Any], str],
                 tagged: Callable[[str, str], Any], limit_error: Callable[[str], Exception],
                 max_depth: int, max_nodes: int) -> None: ...

def load_all(data: bytes, resolve: Callable[[str], Any], key_of: Callable[[Any], str],
             tagged: Callable[[str, str], Any], limit_error: Callable[[str], Exception],
             syntax_error: Callable[[str, int, int], Exception], max_depth: int,
             max_nodes: int) -> list[Any]: ...
def walk(doc: Any, limit_error: Callable[[str], Exception], max_depth: int,
         max_nodes: int) -> int: ...
def scan_json(text: bytes) -> tuple[int, int]: ...
