"""Which device attributes a DRA CEL selector can read, from its text.

A selector reads an attribute through `device.attributes["domain"].id` (or `["id"]`, or
the optional forms `.?id` / `[?"id"]`). `attributes` accepts an expression only when
every use of `device.attributes` is such a literal two-step access; any other use (the
domain map bound to a variable, iterated by a macro, tested with `in` or `size`, indexed
by a computed key) may read any attribute, and the answer is None. Raw, triple-quoted
and escaped string literals are not followed either (None). The domain is not
distinguished: an id read under one domain counts as read under all, which only keeps
more attributes than needed.
"""

from __future__ import annotations

import functools
import re

_STRING = r'"(?:[^"\\\n])*"|\'(?:[^\'\\\n])*\''
_TOKEN = re.compile(rf"{_STRING}|\s+|.", re.S)
_ATTRS = "device.attributes"
_ACCESS = re.compile(rf'\[\??({_STRING})\]|\.\??([A-Za-z_][A-Za-z0-9_]*)')


def _compact(expression: str) -> str | None:
    """The expression without whitespace outside string literals; None when it uses
    literal forms this reader does not follow (raw or triple-quoted strings, escapes)."""
    if '"""' in expression or "'''" in expression or "\\" in expression:
        return None
    out = []
    for m in _TOKEN.finditer(expression):
        tok = m.group(0)
        if tok.isspace():
            continue
        out.append(tok)
    text = "".join(out)
    if re.search(r'\b[rRbB]["\']', text):
        return None
    return text


@functools.lru_cache(maxsize=4096)
def attributes(expression: str) -> frozenset[str] | None:
    """The attribute ids (the part after `domain/`) a CEL selector may read, or None
    when it may read any attribute."""
    text = _compact(expression)
    if text is None:
        return None
    found: set[str] = set()
    start = 0
    while (at := text.find(_ATTRS, start)) >= 0:
        pos = at + len(_ATTRS)
        parts: list[str] = []
        while len(parts) < 2:
            m = _ACCESS.match(text, pos)
            if m is None:
                break
            parts.append(m.group(1)[1:-1] if m.group(1) else m.group(2))
            pos = m.end()
        if len(parts) < 2 or text.startswith("(", pos):
            return None  # the domain map itself is used: any attribute may be read
        found.add(parts[1])
        start = pos
    # A macro or `in` over an attribute map uses the map as a value: caught above.
    return frozenset(found)


