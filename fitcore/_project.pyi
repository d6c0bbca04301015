from collections.abc import Callable, Mapping, Sequence
from typing import Any

def node_parts(n: Any, used: Mapping[str, Any], local: list[tuple[tuple[str, str], list[Any]]],
               allocated_by_pool: dict[tuple[str, str], Sequence[tuple[Any, ...]]],
               hostname: str) -> tuple[Any, ...]: ...
def node_key(proj: Any, e: Any, allocated: Mapping[tuple[str, str], Sequence[tuple[Any, ...]]],
             states: dict[tuple[Any, ...], str], state_of: Callable[[tuple[Any, ...]], str]
             ) -> tuple[int, tuple[tuple[tuple[str, str], tuple[str, ...]], ...]]: ...
