from array import array
from collections.abc import Sequence

class Compiled:
    def __init__(self, packed: array[int], header: array[int]) -> None: ...
    @property
    def state_size(self) -> int: ...

def search(problem: Compiled, state: array[int], budget: int
           ) -> tuple[int, int, list[int]]: ...

def device_classes(n_alt: int, base: array[int], dev_multi: array[int], member: bytes,
                   n_con: int, con_val: array[int]
                   ) -> tuple[array[int], array[int], array[int], array[int], array[int],
                              array[int]]: ...

def pack(fields: list[Sequence[int] | int], head: list[int]
         ) -> tuple[array[int], array[int]]: ...
