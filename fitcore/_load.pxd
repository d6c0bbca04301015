# Compiled reading of the files `fitgate fit` loads (fitcore/read.py is the facade).
# YAML: libyaml's C parser (events) and a builder of plain dicts, lists and scalars, with
# YAML 1.1 scalars resolved as Kubernetes does (fitcore/yaml11.py, once per distinct
# text); the reference is the PyYAML reader in fitcore/read.py, and
# tests/fitcore/test_yaml11.py holds the two to the same answers. JSON (parsed by
# orjson): the limits walk and the key count that shows no duplicate key was dropped.

cdef extern from "yaml.h" nogil:
    ctypedef enum yaml_event_type_t:
        YAML_NO_EVENT
        YAML_STREAM_START_EVENT
        YAML_STREAM_END_EVENT
        YAML_DOCUMENT_START_EVENT
        YAML_DOCUMENT_END_EVENT
        YAML_ALIAS_EVENT
        YAML_SCALAR_EVENT
        YAML_SEQUENCE_START_EVENT
        YAML_SEQUENCE_END_EVENT
        YAML_MAPPING_START_EVENT
        YAML_MAPPING_END_EVENT

    ctypedef struct yaml_mark_t:
        size_t index    # byte offset in the input
        size_t line     # 0-based
        size_t column   # 0-based

    ctypedef struct _alias_data:
        unsigned char *anchor
    ctypedef struct _scalar_data:
        unsigned char *anchor
        unsigned char *tag             # NULL when untagged
        unsigned char *value           # UTF-8, not NUL-terminated
        size_t length
        int plain_implicit             # plain style and no tag: resolve by content
        int quoted_implicit
    ctypedef struct _collection_start_data:
        unsigned char *anchor
        unsigned char *tag
    ctypedef union _event_data:
        _alias_data alias
        _scalar_data scalar
        _collection_start_data sequence_start
        _collection_start_data mapping_start

    ctypedef struct yaml_event_t:
        yaml_event_type_t type
        _event_data data
        yaml_mark_t start_mark
        yaml_mark_t end_mark

    ctypedef struct yaml_parser_t:
        int error
        const char *problem
        yaml_mark_t problem_mark
        const char *context
        yaml_mark_t context_mark

    int yaml_parser_initialize(yaml_parser_t *parser)
    void yaml_parser_delete(yaml_parser_t *parser)
    void yaml_parser_set_input_string(yaml_parser_t *parser, const unsigned char *input,
                                      size_t size)
    int yaml_parser_parse(yaml_parser_t *parser, yaml_event_t *event)
    void yaml_event_delete(yaml_event_t *event)


cdef class Builder:
    # The values of one YAML stream, built event by event.
    cdef list docs           # the documents built so far
    cdef object root         # the value of the document being built
    cdef object top          # the innermost open container (a dict or a list), or None
    cdef bint top_dict       # whether `top` is a dict
    cdef object pending      # top's pending key, _NOKEY (waits for a key) or _MERGE
    cdef object literal      # None, or the keys top set literally (after a merge)
    cdef object anchor       # top's anchor, or None
    cdef Py_ssize_t started  # the node count at top's start
    cdef list saved          # the fields above for each enclosing open container
    cdef dict anchors        # anchor -> its value (this document)
    cdef dict sizes          # anchor -> how many values it expands to
    cdef set open_anchors    # anchors of containers still open (an alias to one recurses)
    cdef dict plain          # plain scalar text -> its value (yaml11.resolve, kept)
    cdef dict plain_keys     # plain key text -> the key (yaml11.key of its value, kept)
    cdef object resolve      # yaml11.resolve
    cdef object key_of       # yaml11.key
    cdef object tagged       # yaml11.tagged
    cdef object limit_error  # (message) -> the exception for a document beyond the limits
    cdef Py_ssize_t count    # values built, aliases counted as what they expand to
    cdef Py_ssize_t max_depth
    cdef Py_ssize_t max_nodes

    cdef int event(self, yaml_event_t *event) except -1
    cdef int add(self, object value, Py_ssize_t line) except -1
    cdef int scalar(self, yaml_event_t *event) except -1
    cdef int merge(self, dict into, object value, Py_ssize_t line) except -1
    cdef int start(self, object container, unsigned char *anchor, Py_ssize_t line) except -1
    cdef int end(self, Py_ssize_t line) except -1
