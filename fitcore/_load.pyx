# Compiled reading of inventory files (see _load.pxd).
#
# YAML. PyYAML's CSafeLoader parses with libyaml
# too, but makes a Python event, two marks and a node for every value and resolves and
# constructs each in Python: about 3 us a value, 15 s for a 5,000-node inventory. Here
# libyaml's events are read in C and turned straight into dicts, lists and scalars; a
# plain scalar is resolved once per distinct text (a dict lookup after that).
#
# Semantics, shared with the PyYAML reader in fitcore/read.py (the reference):
# - scalars: plain and untagged ones by fitcore.yaml11.resolve (YAML 1.1 as go-yaml v2
#   reads it), quoted or `!` ones are strings, `!!str/int/float/bool/null` by
#   yaml11.tagged, other tags leave the text (as go-yaml does);
# - mapping keys by yaml11.key (JSON object keys); a duplicate literal key is refused;
# - merge keys (`<<`) as go-yaml v2: in order of appearance, a later entry overriding an
#   earlier one, the maps of a merged list earliest first in precedence;
# - aliases share the anchored value; one to a container still open is refused; each
#   counts as the values it expands to against the node limit.

from cpython.dict cimport PyDict_Next
from cpython.list cimport PyList_GET_ITEM
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memchr

cdef object _NOKEY = object()  # a dict waits for its next key
# yaml11.resolve gives a plain scalar its own text when the text is none of yaml11.WORDS
# (at most this long; tests/fitcore/test_json_scan.py holds it) and does not start as a
# number does (a sign, a digit or a dot): most values of an inventory (names, ids).
cdef Py_ssize_t _LONGEST_WORD = 5


cdef inline bint _number_start(unsigned char c) noexcept nogil:
    return c == 46 or c == 43 or c == 45 or 48 <= c <= 57  # . + - 0-9
cdef object _MERGE = object()  # a dict's pending key is a merge key
cdef bytes _MERGE_TAG = b"tag:yaml.org,2002:merge"


cdef class Builder:

    def __init__(self, resolve, key_of, tagged, limit_error, Py_ssize_t max_depth,
                 Py_ssize_t max_nodes):
        self.docs, self.saved = [], []
        self.top, self.top_dict, self.pending, self.literal, self.anchor = (
            None, False, _NOKEY, None, None)
        self.started = 0
        self.anchors, self.sizes, self.open_anchors = {}, {}, set()
        self.plain, self.plain_keys = {}, {}
        self.resolve, self.key_of, self.tagged = resolve, key_of, tagged
        self.limit_error = limit_error
        self.max_depth, self.max_nodes = max_depth, max_nodes
        self.count = 0
        self.root = None

    cdef int event(self, yaml_event_t *event) except -1:
        cdef yaml_event_type_t kind = event.type
        cdef Py_ssize_t line = event.start_mark.line + 1
        if kind == YAML_SCALAR_EVENT:
            return self.scalar(event)
        if kind == YAML_MAPPING_START_EVENT:
            return self.start({}, event.data.mapping_start.anchor, line)
        if kind == YAML_SEQUENCE_START_EVENT:
            return self.start([], event.data.sequence_start.anchor, line)
        if kind == YAML_MAPPING_END_EVENT or kind == YAML_SEQUENCE_END_EVENT:
            return self.end(line)
        if kind == YAML_ALIAS_EVENT:
            name = (<bytes>event.data.alias.anchor).decode()
            if name in self.open_anchors:
                raise self.limit_error(f"line {line}: alias *{name} refers to a value that "
                                       "contains it")
            if name not in self.anchors:
                raise self.limit_error(f"line {line}: unknown anchor *{name}")
            self.count += self.sizes[name]
            if self.count > self.max_nodes:
                raise self.limit_error(f"line {line}: expands to more than "
                                       f"{self.max_nodes:,} values (YAML aliases?)")
            return self.add(self.anchors[name], line)
        if kind == YAML_DOCUMENT_START_EVENT:
            self.anchors.clear()
            self.sizes.clear()
            self.root = None
        elif kind == YAML_DOCUMENT_END_EVENT:
            self.docs.append(self.root)
            self.root = None
        return 0

    cdef int scalar(self, yaml_event_t *event) except -1:
        cdef Py_ssize_t line = event.start_mark.line + 1
        cdef bint as_key = False
        text = PyUnicode_DecodeUTF8(<char *>event.data.scalar.value,
                                    <Py_ssize_t>event.data.scalar.length, "strict")
        if self.top_dict and self.pending is _NOKEY:
            as_key = True
        if event.data.scalar.plain_implicit and event.data.scalar.tag == NULL:
            if as_key:
                value = self.plain_keys.get(text, _NOKEY)
                if value is _NOKEY:
                    value = _MERGE if text == "<<" else self._key(self.resolve(text), line)
                    self.plain_keys[text] = value
            elif event.data.scalar.length > _LONGEST_WORD and not _number_start(
                    event.data.scalar.value[0]):
                value = text  # yaml11.resolve's answer, without a cache the size of the file
            else:
                value = self.plain.get(text, _NOKEY)
                if value is _NOKEY:
                    value = self.plain[text] = self.resolve(text)
        elif event.data.scalar.tag == NULL:
            value = text
        else:
            tag = (<bytes>event.data.scalar.tag).decode()
            if as_key and tag == "tag:yaml.org,2002:merge":
                value = _MERGE
            else:
                try:
                    value = self.tagged(tag, text)
                except ValueError as exc:
                    raise self.limit_error(f"line {line}: {exc}") from None
                if as_key:
                    value = self._key(value, line)
        if not as_key:  # values are counted, as the reference counts them; keys are not
            self.count += 1
            if self.count > self.max_nodes:
                raise self.limit_error(f"line {line}: expands to more than "
                                       f"{self.max_nodes:,} values (YAML aliases?)")
        if event.data.scalar.anchor != NULL:
            name = (<bytes>event.data.scalar.anchor).decode()
            self.anchors[name] = value
            self.sizes[name] = 1
        if as_key:
            self.pending = value
            return 0
        return self.add(value, line)

    def _key(self, value, Py_ssize_t line):
        try:
            return self.key_of(value)
        except ValueError as exc:
            raise self.limit_error(f"line {line}: {exc}") from None

    cdef int add(self, object value, Py_ssize_t line) except -1:
        cdef Py_ssize_t size
        top = self.top
        if top is None:
            self.root = value
            return 0
        if not self.top_dict:
            (<list>top).append(value)
            return 0
        key = self.pending
        if key is _NOKEY:  # a key given by an alias, or a container (refused)
            self.pending = self._key(value, line)
            return 0
        self.pending = _NOKEY
        if key is _MERGE:
            return self.merge(<dict>top, value, line)
        seen = self.literal
        if seen is None:
            size = len(<dict>top)
            (<dict>top)[key] = value
            if len(<dict>top) == size:
                raise self.limit_error(f"line {line}: duplicate key {key!r}")
            return 0
        if key in <set>seen:
            raise self.limit_error(f"line {line}: duplicate key {key!r}")
        (<set>seen).add(key)
        (<dict>top)[key] = value
        return 0

    cdef int merge(self, dict into, object value, Py_ssize_t line) except -1:
        if self.literal is None:
            self.literal = set(into)
        maps = reversed(value) if type(value) is list else (value,)
        for m in maps:
            if type(m) is not dict:
                raise self.limit_error(f"line {line}: a merge key (<<) takes a mapping or a "
                                       "list of mappings")
            into.update(<dict>m)
        return 0

    cdef int start(self, object container, unsigned char *anchor, Py_ssize_t line) except -1:
        if len(self.saved) >= self.max_depth:
            raise self.limit_error(f"line {line}: nested more than {self.max_depth} levels "
                                   "deep")
        self.count += 1
        name = None
        if anchor != NULL:
            name = (<bytes>anchor).decode()
            self.anchors[name] = container
            self.open_anchors.add(name)
        self.saved.append((self.top, self.top_dict, self.pending, self.literal, self.anchor,
                           self.started))
        self.top, self.top_dict, self.pending, self.literal = (
            container, type(container) is dict, _NOKEY, None)
        self.anchor, self.started = name, self.count
        return 0

    cdef int end(self, Py_ssize_t line) except -1:
        container, name = self.top, self.anchor
        if name is not None:
            self.open_anchors.discard(name)
            self.sizes[name] = self.count - self.started + 1
        (self.top, self.top_dict, self.pending, self.literal, self.anchor,
         self.started) = self.saved.pop()
        return self.add(container, line)


def load_all(bytes data, resolve, key_of, tagged, limit_error, syntax_error,
             Py_ssize_t max_depth, Py_ssize_t max_nodes):
    """Every document of a YAML stream (UTF-8 bytes) as plain values. `syntax_error`
    makes the exception for text that is not YAML, from (message, line, column);
    `limit_error` the one for a document beyond the limits or not read strictly."""
    cdef yaml_parser_t parser
    cdef yaml_event_t event
    cdef Builder builder = Builder(resolve, key_of, tagged, limit_error, max_depth, max_nodes)
    cdef int ok
    cdef bint done = False
    if not yaml_parser_initialize(&parser):
        raise MemoryError("libyaml: cannot make a parser")
    try:
        yaml_parser_set_input_string(&parser, <const unsigned char *>data, len(data))
        while not done:
            # Not `with nogil`: releasing and taking the GIL back for each of millions of
            # events cost more (0.2 s at 5,000 nodes) than any thread gains in between.
            ok = yaml_parser_parse(&parser, &event)
            if not ok:
                problem = parser.problem.decode() if parser.problem != NULL else "cannot parse"
                if parser.context != NULL:
                    problem = f"{parser.context.decode()}: {problem}"
                raise syntax_error(problem, parser.problem_mark.line + 1,
                                   parser.problem_mark.column + 1)
            try:
                done = event.type == YAML_STREAM_END_EVENT
                builder.event(&event)
            finally:
                yaml_event_delete(&event)
    finally:
        yaml_parser_delete(&parser)
    return builder.docs


# ------------------------------------------------------------------------------ JSON
# orjson parses JSON text; what it does not check is checked here, in C.


cdef Py_ssize_t _TOO_DEEP = -2, _TOO_MANY = -3


cdef Py_ssize_t _keys(object v, Py_ssize_t depth, Py_ssize_t max_depth, Py_ssize_t *nodes,
                      Py_ssize_t max_nodes) except -1:
    """The mapping keys under `v` (a dict or a list at `depth`), its values added to
    `nodes`; _TOO_DEEP or _TOO_MANY past a limit. Recursive: `max_depth` bounds it."""
    cdef Py_ssize_t keys = 0, pos = 0, i, n, got
    cdef PyObject *key
    cdef PyObject *item
    if depth > max_depth:
        return _TOO_DEEP
    n = len(<dict>v) if type(v) is dict else len(<list>v)
    nodes[0] += n
    if nodes[0] > max_nodes:
        return _TOO_MANY
    if type(v) is dict:
        keys = n
        while PyDict_Next(<dict>v, &pos, &key, &item):
            if type(<object>item) is dict or type(<object>item) is list:
                got = _keys(<object>item, depth + 1, max_depth, nodes, max_nodes)
                if got < 0:
                    return got
                keys += got
        return keys
    for i in range(n):
        item = PyList_GET_ITEM(<list>v, i)
        if type(<object>item) is dict or type(<object>item) is list:
            got = _keys(<object>item, depth + 1, max_depth, nodes, max_nodes)
            if got < 0:
                return got
            keys += got
    return keys


def walk(object doc, limit_error, Py_ssize_t max_depth, Py_ssize_t max_nodes):
    """The number of mapping keys in a parsed JSON document (plain dicts, lists and
    scalars), refusing one that nests more than `max_depth` levels or holds more than
    `max_nodes` values (`limit_error(message)`)."""
    cdef Py_ssize_t nodes = 1, keys
    if type(doc) is not dict and type(doc) is not list:
        return 0
    keys = _keys(doc, 1, max_depth, &nodes, max_nodes)
    if keys == _TOO_DEEP:
        raise limit_error(f"nested more than {max_depth} levels deep")
    if keys == _TOO_MANY:
        raise limit_error(f"expands to more than {max_nodes:,} values")
    return keys


def scan_json(const unsigned char[:] text):
    """(object members, long numbers) of a JSON text: how many strings outside strings
    are followed by a colon (blanks between or not), which is every object key and
    nothing else; and how many numbers have 19 digits or more in a row (one may not fit
    64 bits). A string ends at the first quote after it not escaped (preceded by an even
    number of backslashes), found with memchr; the text is not validated."""
    cdef Py_ssize_t i = 0, j, b, n = text.shape[0], members = 0, longs = 0, run = 0
    cdef const unsigned char *at = &text[0] if n else NULL
    cdef const unsigned char *quote
    cdef unsigned char c
    with nogil:
        while i < n:
            c = at[i]
            if c == 34:  # '"': a string, to its closing quote
                i += 1
                while True:
                    quote = <const unsigned char *>memchr(at + i, 34, n - i)
                    if quote == NULL:
                        i = n
                        break
                    i = quote - at
                    b = i - 1
                    while at[b] == 92:  # stops at the opening quote at the latest
                        b -= 1
                    if (i - 1 - b) % 2 == 0:
                        break
                    i += 1
                j = i + 1
                while j < n and (at[j] == 32 or at[j] == 9 or at[j] == 13 or at[j] == 10):
                    j += 1
                if j < n and at[j] == 58:  # ':'
                    members += 1
                run = 0
            elif 48 <= c <= 57:
                run += 1
                if run == 19:
                    longs += 1
            else:
                run = 0
            i += 1
    return members, longs
