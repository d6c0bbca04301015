"""Errors fitcore raises, each naming the object and field a person must fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field of one object, e.g.
    `ResourceSlice node-a-gpus: spec.devices[3].attributes["x/y"]: must be a ...`."""

    obj: str  # "Kind namespace/name" or "Kind name"
    path: str  # JSON path within the object, e.g. "spec.devices[3].name"
    message: str
    source: str | None = None  # file name, when read from a file

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        field = f": {self.path}" if self.path else ""
        return f"{where}{self.obj}{field}: {self.message}"


class InputError(ValueError):
    """Bad input: every problem found, not just the first."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


class Collector:
    """Collects field errors while parsing one object, so that all are reported at once."""

    def __init__(self, obj: str | Callable[[], str], source: str | None = None) -> None:
        # `obj` may be a function that names the object: called at the first problem
        # only (most objects have none, and naming one costs a few lookups).
        self._obj = obj
        self.source = source
        self.errors: list[FieldError] = []

    @property
    def obj(self) -> str:
        if not isinstance(self._obj, str):
            self._obj = self._obj()
        return self._obj

    def add(self, path: str, message: str) -> None:
        self.errors.append(FieldError(self.obj, path, message, self.source))

    def raise_if_any(self) -> None:
        if self.errors:
            raise InputError(self.errors)
