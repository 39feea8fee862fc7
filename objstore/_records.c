/* objstore._records: the checks of a span of pack records that a fetch makes, one call a span.
 *
 * `scan(data, start, entries, crc32)` checks each record of `entries` ((oid,
 * offset, length): the offset, in the pack, of the record's stored bytes) in `data`, the
 * pack's bytes from offset `start`:
 *   - framing: the record's header (oid, length u64 LE, crc u32 LE, just before its stored
 *     bytes) names the entry's oid and length, and `crc32` (zlib's) of the stored bytes, then
 *     of the header's oid and length, is the header's crc (packfile.record_crc);
 *   - envelope header: the stored bytes open with magic "CKO", format 1 and a codec of 0 to
 *     4 (codec.read_header), and an envelope of codec 2 to 4 holds the id it names
 *     (codec.envelope_refs).
 * It returns [(oid, stored, crc, refs)] in the order of `entries`, refs () or (the named
 * id's 32 bytes,), as packs.py's Python loop gives them; or, at the first record that
 * fails a check, that record's index, and the caller checks it again in Python, which says
 * what is wrong. It never raises for damaged data.
 *
 * Why: a fresh-machine restore fetches tens of thousands of records (mostly block members of
 * 60 bytes), and the Python loop costs microseconds a record on the thread that also stores
 * and stages them. The envelope constants mirror objstore/codec.py; tests/remote checks that
 * both loops agree on intact and damaged spans. This file knows nothing of stores or remotes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define OID_SIZE 32
#define RECORD_HEADER (OID_SIZE + 8 + 4)
#define ENVELOPE_HEADER 13 /* magic 3, format 1, codec 1, length u64 */
#define FORMAT 1
#define LAST_CODEC 4
#define FIRST_REF_CODEC 2 /* dictionary, delta and block envelopes name an id */

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* crc32(data, start) through zlib's Python function; -1 with an exception set on failure. */
static long long call_crc(PyObject *crc32, PyObject *data, PyObject *start) {
    PyObject *args[2] = {data, start};
    PyObject *got = PyObject_Vectorcall(crc32, args, start ? 2 : 1, NULL);
    if (!got) return -1;
    long long value = PyLong_AsLongLong(got);
    Py_DECREF(got);
    return value;
}

/* The record's (oid, stored, crc, refs), NULL with *bad set for a record that fails a check,
 * NULL with an exception set (and *bad unset) for anything else. */
static PyObject *check_one(const unsigned char *buf, Py_ssize_t size, Py_ssize_t start,
                           PyObject *entry, PyObject *crc32, int *bad) {
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
        PyErr_SetString(PyExc_TypeError, "an entry is (oid, offset, length)");
        return NULL;
    }
    PyObject *oid = PyTuple_GET_ITEM(entry, 0);
    Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
    if (offset == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t length = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 2));
    if (length == -1 && PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(oid) || PyBytes_GET_SIZE(oid) != OID_SIZE) {
        PyErr_SetString(PyExc_TypeError, "an entry's oid is 32 bytes");
        return NULL;
    }
    Py_ssize_t at = offset - start;
    if (length < 0 || at < RECORD_HEADER || at > size || length > size - at) {
        *bad = 1;
        return NULL;
    }
    const unsigned char *header = buf + at - RECORD_HEADER;
    const unsigned char *stored_at = buf + at;
    if (memcmp(header, PyBytes_AS_STRING(oid), OID_SIZE) != 0
            || le64(header + OID_SIZE) != (uint64_t)length
            || length < ENVELOPE_HEADER || memcmp(stored_at, "CKO", 3) != 0
            || stored_at[3] != FORMAT || stored_at[4] > LAST_CODEC
            || (stored_at[4] >= FIRST_REF_CODEC && length < ENVELOPE_HEADER + OID_SIZE)) {
        *bad = 1;
        return NULL;
    }
    PyObject *stored = PyBytes_FromStringAndSize((const char *)stored_at, length);
    if (!stored) return NULL;
    PyObject *named = NULL, *crc_obj = NULL, *refs = NULL, *ref = NULL, *partial = NULL;
    long long crc = call_crc(crc32, stored, NULL);
    if (crc < 0) goto fail;
    named = PyBytes_FromStringAndSize((const char *)header, OID_SIZE + 8);
    partial = PyLong_FromLongLong(crc);
    if (!named || !partial) goto fail;
    crc = call_crc(crc32, named, partial);
    if (crc < 0) goto fail;
    if ((uint32_t)crc != le32(header + OID_SIZE + 8)) {
        *bad = 1;
        goto fail;
    }
    crc_obj = PyLong_FromLongLong(crc);
    if (!crc_obj) goto fail;
    if (stored_at[4] >= FIRST_REF_CODEC) {
        ref = PyBytes_FromStringAndSize((const char *)stored_at + ENVELOPE_HEADER, OID_SIZE);
        if (!ref) goto fail;
        refs = PyTuple_Pack(1, ref);
    } else {
        refs = PyTuple_New(0);
    }
    if (!refs) goto fail;
    PyObject *record = PyTuple_Pack(4, oid, stored, crc_obj, refs);
    Py_DECREF(stored);
    Py_DECREF(named);
    Py_DECREF(partial);
    Py_DECREF(crc_obj);
    Py_XDECREF(ref);
    Py_DECREF(refs);
    return record;
fail:
    Py_DECREF(stored);
    Py_XDECREF(named);
    Py_XDECREF(partial);
    Py_XDECREF(crc_obj);
    Py_XDECREF(ref);
    Py_XDECREF(refs);
    return NULL;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    Py_ssize_t start;
    PyObject *entries, *crc32;
    if (!PyArg_ParseTuple(args, "y*nOO", &data, &start, &entries, &crc32))
        return NULL;
    PyObject *seq = PySequence_Fast(entries, "entries must be a sequence");
    PyObject *out = NULL;
    if (!seq) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(count);
    if (!out) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int bad = 0;
        PyObject *record = check_one(data.buf, data.len, start,
                                     PySequence_Fast_GET_ITEM(seq, i), crc32, &bad);
        if (!record) {
            Py_CLEAR(out);
            if (bad && !PyErr_Occurred()) out = PyLong_FromSsize_t(i);
            goto done;
        }
        PyList_SET_ITEM(out, i, record);
    }
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&data);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, start: int, entries, crc32) -> list | int\n"
     "Each record of `entries` ((oid, offset, length)) in `data` (the pack's bytes from\n"
     "`start`) with its framing and envelope header checked, as [(oid, stored, crc, refs)];\n"
     "or the index of the first record that fails a check."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
