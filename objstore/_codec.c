/* objstore._codec: the two decodings of objstore/codec.py that a restore makes per object:
 * a tree's bytes, for the trees whose entries are all of the common kind (a file, an
 * executable or a directory, with a plain name), and a block member's envelope.
 *
 * `configure(entry_type, tree_type, kinds, entry_fields, tree_field)` is called once by
 * objstore/codec.py with objects.py's `TreeEntry` and `Tree` classes, the `EntryKind` members
 * by code, the slots of TreeEntry (name, kind, oid, target, size, mode) and Tree's `entries`
 * slot. `decode_tree(data)` then returns the `Tree` that codec.decode_tree would return for
 * `data`, or None, and the caller decodes `data` in Python, which either decodes it the same
 * way or says what is wrong with it. None is returned for anything but canonical msgpack of
 * the tree format (every integer, byte string and array in its shortest encoding, nothing
 * after it) whose entries each pass objects.py's `_common_entry` and come in strictly
 * increasing name order: so a symlink, a tombstone, a damaged or non-canonical tree all take
 * the Python path.
 *
 * `member_place(stored)` returns (block id, offset, length) of a well-formed block member's
 * envelope (codec 4: the header, the block's id, then the offset and the length as two
 * varints that end the envelope, the length the header's), as codec.member_header does; or
 * None for any other envelope, and the caller asks the Python code, which says what is wrong.
 *
 * Neither raises for damaged data. Why: a restore or a diff of a large tree decodes thousands
 * of trees, and a restore tens of thousands of member envelopes, and the Python loops cost
 * microseconds an entry or an envelope. The format constants mirror objstore/codec.py and
 * objstore/objects.py; tests/objstore checks that both paths agree on valid, uncommon and
 * damaged input. This file knows nothing of stores.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define OID_SIZE 32
#define TREE_FORMAT 1
#define KIND_FILE 1
#define KIND_EXECUTABLE 2
#define KIND_TREE 4
#define LAST_KIND 5
#define MODE_BITS 0777
#define FIELDS 6 /* name, kind, oid, target, size, mode */
#define ENVELOPE_HEADER 13 /* magic "CKO", format 1, codec 1, content length u64 LE */
#define FORMAT 1
#define CODEC_BLOCK 4

static PyTypeObject *entry_type, *tree_type;
static PyObject *kinds[LAST_KIND + 1];
static PyObject *entry_fields[FIELDS];
static PyObject *tree_field;

typedef struct {
    const unsigned char *at, *end;
} Reader;

/* The length of a canonical array header; -1 for anything else. */
static Py_ssize_t read_array(Reader *r) {
    if (r->at >= r->end) return -1;
    unsigned char tag = *r->at++;
    if ((tag & 0xf0) == 0x90) return tag & 0x0f;
    if (tag == 0xdc && r->end - r->at >= 2) {
        Py_ssize_t n = (Py_ssize_t)r->at[0] << 8 | r->at[1];
        r->at += 2;
        return n >= 16 ? n : -1;
    }
    if (tag == 0xdd && r->end - r->at >= 4) {
        Py_ssize_t n = (Py_ssize_t)((uint32_t)r->at[0] << 24 | (uint32_t)r->at[1] << 16
                                    | (uint32_t)r->at[2] << 8 | r->at[3]);
        r->at += 4;
        return n >= 65536 ? n : -1;
    }
    return -1;
}

/* A canonical unsigned integer into *value; 0 for anything else (a negative one too). */
static int read_uint(Reader *r, uint64_t *value) {
    if (r->at >= r->end) return 0;
    unsigned char tag = *r->at++;
    if (tag < 0x80) {
        *value = tag;
        return 1;
    }
    int width;
    uint64_t least;
    switch (tag) {
        case 0xcc: width = 1; least = 0x80; break;
        case 0xcd: width = 2; least = 0x100; break;
        case 0xce: width = 4; least = 0x10000; break;
        case 0xcf: width = 8; least = 0x100000000ULL; break;
        default: return 0;
    }
    if (r->end - r->at < width) return 0;
    uint64_t v = 0;
    for (int i = 0; i < width; i++) v = v << 8 | r->at[i];
    r->at += width;
    *value = v;
    return v >= least;
}

/* A canonical bin (msgpack's byte string) into *bytes, *length; 0 for anything else. */
static int read_bin(Reader *r, const unsigned char **bytes, Py_ssize_t *length) {
    if (r->at >= r->end) return 0;
    unsigned char tag = *r->at++;
    Py_ssize_t n, least;
    Py_ssize_t left = r->end - r->at;
    if (tag == 0xc4 && left >= 1) {
        n = r->at[0];
        least = 0;
        r->at += 1;
    } else if (tag == 0xc5 && left >= 2) {
        n = (Py_ssize_t)r->at[0] << 8 | r->at[1];
        least = 0x100;
        r->at += 2;
    } else if (tag == 0xc6 && left >= 4) {
        n = (Py_ssize_t)((uint32_t)r->at[0] << 24 | (uint32_t)r->at[1] << 16
                         | (uint32_t)r->at[2] << 8 | r->at[3]);
        least = 0x10000;
        r->at += 4;
    } else {
        return 0;
    }
    if (n < least || r->end - r->at < n) return 0;
    *bytes = r->at;
    *length = n;
    r->at += n;
    return 1;
}

/* Whether `name` is one path component: not empty, no '/' or NUL, not "." or "..". */
static int plain_name(const unsigned char *name, Py_ssize_t length) {
    if (length == 0 || memchr(name, '/', length) || memchr(name, 0, length)) return 0;
    return !(name[0] == '.' && (length == 1 || (length == 2 && name[1] == '.')));
}

/* Whether the name `b` sorts strictly after `a`, as Python compares bytes. */
static int after(const unsigned char *a, Py_ssize_t alen, const unsigned char *b,
                 Py_ssize_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c < 0 || (c == 0 && alen < blen);
}

static int set_field(PyObject *field, PyObject *obj, PyObject *value) {
    descrsetfunc set = Py_TYPE(field)->tp_descr_set;
    int failed = set(field, obj, value);
    Py_DECREF(value);
    return failed;
}

/* A new TreeEntry of the common kind, its fields set as objects.py's `make_entry` sets them;
 * NULL with an exception set if Python could not make it. */
static PyObject *new_entry(const unsigned char *name, Py_ssize_t name_length, int kind,
                           const unsigned char *oid, uint64_t size, int has_mode,
                           uint64_t mode) {
    PyObject *entry = entry_type->tp_alloc(entry_type, 0);
    if (!entry) return NULL;
    PyObject *values[FIELDS];
    values[0] = PyBytes_FromStringAndSize((const char *)name, name_length);
    values[1] = Py_NewRef(kinds[kind]);
    values[2] = PyBytes_FromStringAndSize((const char *)oid, OID_SIZE);
    values[3] = Py_NewRef(Py_None);
    values[4] = PyLong_FromUnsignedLongLong(size);
    values[5] = has_mode ? PyLong_FromUnsignedLongLong(mode) : Py_NewRef(Py_None);
    int failed = 0;
    for (int i = 0; i < FIELDS; i++) {
        if (!values[i]) {
            failed = 1;
        } else if (!failed) {
            failed = set_field(entry_fields[i], entry, values[i]) != 0;
        } else {
            Py_DECREF(values[i]);
        }
    }
    if (failed) {
        Py_DECREF(entry);
        return NULL;
    }
    return entry;
}

/* The entries of the tree `data`, as a tuple; Py_None (a new reference) where the Python
 * path must decide; NULL with an exception set if Python could not make them. */
static PyObject *decode_entries(const unsigned char *data, Py_ssize_t size) {
    Reader r = {data, data + size};
    uint64_t format;
    if (read_array(&r) != 2 || !read_uint(&r, &format) || format != TREE_FORMAT)
        Py_RETURN_NONE;
    Py_ssize_t count = read_array(&r);
    if (count < 0 || count > r.end - r.at) Py_RETURN_NONE; /* a row takes bytes */
    PyObject *entries = PyTuple_New(count);
    if (!entries) return NULL;
    const unsigned char *previous = NULL;
    Py_ssize_t previous_length = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t fields = read_array(&r);
        const unsigned char *name, *oid;
        Py_ssize_t name_length, oid_length;
        uint64_t kind, size, mode = 0;
        if ((fields != 4 && fields != 5) || !read_bin(&r, &name, &name_length)
                || !read_uint(&r, &kind) || !read_bin(&r, &oid, &oid_length)
                || !read_uint(&r, &size) || (fields == 5 && !read_uint(&r, &mode)))
            goto python;
        if ((kind != KIND_FILE && kind != KIND_EXECUTABLE && kind != KIND_TREE)
                || oid_length != OID_SIZE || !plain_name(name, name_length)
                || (previous && !after(previous, previous_length, name, name_length)))
            goto python;
        if (fields == 5) {
            uint64_t usual = kind == KIND_EXECUTABLE ? 0755 : 0644;
            if (kind == KIND_TREE || mode & ~(uint64_t)MODE_BITS || mode == usual
                    || ((mode & 0100) != 0) != (kind == KIND_EXECUTABLE))
                goto python;
        }
        PyObject *entry = new_entry(name, name_length, (int)kind, oid, size, fields == 5, mode);
        if (!entry) {
            Py_DECREF(entries);
            return NULL;
        }
        PyTuple_SET_ITEM(entries, i, entry);
        previous = name;
        previous_length = name_length;
    }
    if (r.at == r.end) return entries;
python:
    Py_DECREF(entries);
    Py_RETURN_NONE;
}

static PyObject *decode(PyObject *Py_UNUSED(self), PyObject *arg) {
    if (!tree_type) {
        PyErr_SetString(PyExc_RuntimeError, "_codec.configure was not called");
        return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *entries = decode_entries(data.buf, data.len);
    PyBuffer_Release(&data);
    if (!entries || entries == Py_None) return entries;
    PyObject *tree = tree_type->tp_alloc(tree_type, 0);
    if (!tree) {
        Py_DECREF(entries);
        return NULL;
    }
    if (set_field(tree_field, tree, entries) != 0) {
        Py_DECREF(tree);
        return NULL;
    }
    return tree;
}

/* A varint (LEB128, at most 64 bits) into *value; 0 for one cut short or too wide. */
static int read_varint(Reader *r, uint64_t *value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && r->at < r->end; shift += 7) {
        unsigned char byte = *r->at++;
        uint64_t bits = (uint64_t)(byte & 0x7f);
        if (shift == 63 && bits > 1) return 0;
        v |= bits << shift;
        if (!(byte & 0x80)) {
            *value = v;
            return 1;
        }
    }
    return 0;
}

static PyObject *member_place(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer stored;
    if (PyObject_GetBuffer(arg, &stored, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *data = stored.buf;
    Reader r = {data + ENVELOPE_HEADER + OID_SIZE, data + stored.len};
    uint64_t offset, length, declared = 0;
    PyObject *place = NULL;
    if (stored.len >= ENVELOPE_HEADER + OID_SIZE && memcmp(data, "CKO", 3) == 0
            && data[3] == FORMAT && data[4] == CODEC_BLOCK) {
        for (int i = 7; i >= 0; i--) declared = declared << 8 | data[5 + i];
        if (read_varint(&r, &offset) && read_varint(&r, &length) && r.at == r.end
                && length == declared) {
            place = Py_BuildValue("(y#KK)", data + ENVELOPE_HEADER, (Py_ssize_t)OID_SIZE,
                                  (unsigned long long)offset, (unsigned long long)length);
        }
    }
    PyBuffer_Release(&stored);
    if (!place && !PyErr_Occurred()) Py_RETURN_NONE;
    return place;
}

static int settable(PyObject *field) {
    return Py_TYPE(field)->tp_descr_set != NULL;
}

static PyObject *configure(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *entry, *tree, *kind_seq, *field_seq, *entries_field;
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyType_Type, &entry, &PyType_Type, &tree,
                          &kind_seq, &field_seq, &entries_field))
        return NULL;
    if (!PyTuple_Check(kind_seq) || PyTuple_GET_SIZE(kind_seq) != LAST_KIND + 1
            || !PyTuple_Check(field_seq) || PyTuple_GET_SIZE(field_seq) != FIELDS
            || !settable(entries_field)) {
        PyErr_SetString(PyExc_TypeError, "configure(entry_type, tree_type, kinds[6], "
                                         "entry_fields[6], tree_field)");
        return NULL;
    }
    for (int i = 0; i < FIELDS; i++) {
        if (!settable(PyTuple_GET_ITEM(field_seq, i))) {
            PyErr_SetString(PyExc_TypeError, "an entry field is not a settable slot");
            return NULL;
        }
    }
    Py_XSETREF(entry_type, (PyTypeObject *)Py_NewRef(entry));
    Py_XSETREF(tree_type, (PyTypeObject *)Py_NewRef(tree));
    for (int i = 0; i <= LAST_KIND; i++)
        Py_XSETREF(kinds[i], Py_NewRef(PyTuple_GET_ITEM(kind_seq, i)));
    for (int i = 0; i < FIELDS; i++)
        Py_XSETREF(entry_fields[i], Py_NewRef(PyTuple_GET_ITEM(field_seq, i)));
    Py_XSETREF(tree_field, Py_NewRef(entries_field));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(entry_type, tree_type, kinds, entry_fields, tree_field) -> None\n"
     "The classes `decode` makes, the entry kinds by code, and the slots it sets."},
    {"decode_tree", decode, METH_O,
     "decode_tree(data) -> Tree | None\n"
     "The tree `data` encodes, if it is canonical and its entries are all common; else None."},
    {"member_place", member_place, METH_O,
     "member_place(stored) -> (block, offset, length) | None\n"
     "Where a well-formed block member's envelope says its content is; else None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_codec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__codec(void) { return PyModule_Create(&module); }
