/* objstore._records: the per-record work of pack records in bulk: the checks of a span that a
 * fetch makes, the crc32 of a record, and the framing of a batch of records for a local pack.
 *
 * `scan(data, start, entries)` checks each record of `entries` ((oid, offset, length): the
 * offset, in the pack, of the record's stored bytes) in `data`, the pack's bytes from offset
 * `start`:
 *   - framing: the record's header (oid, length u64 LE, crc u32 LE, just before its stored
 *     bytes) names the entry's oid and length, and the crc32 of the stored bytes, then of the
 *     header's oid and length, is the header's crc (packfile.record_crc);
 *   - envelope header: the stored bytes open with magic "CKO", format 1 and a codec of 0 to
 *     4 (codec.read_header), and an envelope of codec 2 to 4 holds the id it names
 *     (codec.envelope_refs).
 * It returns [(oid, stored, crc, refs)] in the order of `entries`, refs () or (the named
 * id's 32 bytes,), as packs.py's Python loop gives them; or, at the first record that
 * fails a check, that record's index, and the caller checks it again in Python, which says
 * what is wrong. It never raises for damaged data.
 *
 * `crc32(data, value=0)` is zlib's crc32 (same polynomial, same results); `record_crc(oid,
 * stored)` is packfile.record_crc; `frame(objects, crcs, into)` writes the records of
 * `objects` ((oid, stored) pairs) as a pack appends them, header then stored bytes each, into
 * a buffer that a pack writer keeps from batch to batch.
 *
 * Why: a fresh-machine restore fetches tens of thousands of records (mostly block members of
 * 60 bytes) and hundreds of megabytes, and the Python loops cost microseconds a record on
 * the thread that also stores and stages them; zlib's table-driven crc32 costs as much again
 * over the bytes, where the carry-less multiply of x86-64 (PCLMULQDQ, checked at run time)
 * folds 64 bytes a step. The envelope constants mirror objstore/codec.py; tests/remote checks
 * that both loops agree on intact and damaged spans, and tests/objstore that crc32 agrees
 * with zlib's. This file knows nothing of stores or remotes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CLMUL_PATH 1
#include <immintrin.h>
#endif

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

/* -- crc32 (zlib's: reflected polynomial 0xEDB88320) ------------------------------------ */

static uint32_t crc_table[8][256];

static void make_crc_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

/* The running (inverted) crc over `len` bytes, eight at a time. */
static uint32_t crc_tables(uint32_t crc, const unsigned char *p, size_t len) {
    while (len >= 8) {
        uint32_t lo = crc ^ le32(p), hi = le32(p + 4);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff]
            ^ crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24]
            ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff]
            ^ crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#ifdef HAVE_CLMUL_PATH
static int have_clmul;

/* The running (inverted) crc over `len` bytes, `len` >= 64 and a multiple of 16: four
 * 128-bit lanes folded 64 bytes a step, then into one, then Barrett-reduced to 32 bits.
 * The constants are the bit-reflected x^(k) mod P(x) of "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction" (Gopal et al., Intel, 2009), as in Linux's
 * crc32-pclmul and Chromium's zlib. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_clmul(uint32_t crc, const unsigned char *buf, size_t len) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* zlib's crc32(value, p, len). */
static uint32_t crc32_of(uint32_t value, const unsigned char *p, size_t len) {
    uint32_t crc = ~value;
#ifdef HAVE_CLMUL_PATH
    if (have_clmul && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        crc = crc_clmul(crc, p, chunk);
        p += chunk;
        len -= chunk;
    }
#endif
    return ~crc_tables(crc, p, len);
}

/* packfile.record_crc: the stored bytes, then the header's oid and length. */
static uint32_t record_crc_of(const unsigned char *oid, const unsigned char *stored,
                              size_t length) {
    unsigned char named[OID_SIZE + 8];
    memcpy(named, oid, OID_SIZE);
    for (int i = 0; i < 8; i++) named[OID_SIZE + i] = (unsigned char)((uint64_t)length >> (8 * i));
    return crc32_of(crc32_of(0, stored, length), named, sizeof named);
}

/* The record's (oid, stored, crc, refs), NULL with *bad set for a record that fails a check,
 * NULL with an exception set (and *bad unset) for anything else. */
static PyObject *check_one(const unsigned char *buf, Py_ssize_t size, Py_ssize_t start,
                           PyObject *entry, PyObject *no_refs, int *bad) {
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
    uint32_t crc = record_crc_of(header, stored_at, (size_t)length);
    if (crc != le32(header + OID_SIZE + 8)) {
        *bad = 1;
        return NULL;
    }
    PyObject *stored = NULL, *crc_obj = NULL, *refs = NULL, *record = NULL;
    stored = PyBytes_FromStringAndSize((const char *)stored_at, length);
    crc_obj = PyLong_FromUnsignedLong(crc);
    if (!stored || !crc_obj) goto done;
    if (stored_at[4] >= FIRST_REF_CODEC) {
        PyObject *ref = PyBytes_FromStringAndSize((const char *)stored_at + ENVELOPE_HEADER,
                                                  OID_SIZE);
        if (!ref) goto done;
        refs = PyTuple_Pack(1, ref);
        Py_DECREF(ref);
    } else {
        refs = Py_NewRef(no_refs);
    }
    if (refs) record = PyTuple_Pack(4, oid, stored, crc_obj, refs);
done:
    Py_XDECREF(stored);
    Py_XDECREF(crc_obj);
    Py_XDECREF(refs);
    return record;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    Py_ssize_t start;
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "y*nO", &data, &start, &entries))
        return NULL;
    PyObject *seq = PySequence_Fast(entries, "entries must be a sequence");
    PyObject *no_refs = PyTuple_New(0);
    PyObject *out = NULL;
    if (!seq || !no_refs) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(count);
    if (!out) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int bad = 0;
        PyObject *record = check_one(data.buf, data.len, start,
                                     PySequence_Fast_GET_ITEM(seq, i), no_refs, &bad);
        if (!record) {
            Py_CLEAR(out);
            if (bad && !PyErr_Occurred()) out = PyLong_FromSsize_t(i);
            goto done;
        }
        PyList_SET_ITEM(out, i, record);
    }
done:
    Py_XDECREF(seq);
    Py_XDECREF(no_refs);
    PyBuffer_Release(&data);
    return out;
}

static PyObject *crc32(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &data, &value))
        return NULL;
    uint32_t crc;
    if (data.len >= (1 << 16)) {  /* long enough to be worth letting other threads run */
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of(value, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32_of(value, data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *record_crc(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer oid, stored;
    if (!PyArg_ParseTuple(args, "y*y*", &oid, &stored))
        return NULL;
    PyObject *out = NULL;
    if (oid.len != OID_SIZE) {
        PyErr_SetString(PyExc_ValueError, "an oid is 32 bytes");
    } else {
        out = PyLong_FromUnsignedLong(
            record_crc_of(oid.buf, stored.buf, (size_t)stored.len));
    }
    PyBuffer_Release(&oid);
    PyBuffer_Release(&stored);
    return out;
}

/* The (oid, stored) of `item` as two bytes objects (borrowed), or 0 with an exception set. */
static int object_parts(PyObject *item, PyObject **oid, PyObject **stored) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2
            || !PyBytes_Check(PyTuple_GET_ITEM(item, 0))
            || PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 0)) != OID_SIZE
            || !PyBytes_Check(PyTuple_GET_ITEM(item, 1))) {
        PyErr_SetString(PyExc_TypeError, "an object is (32-byte oid, stored bytes)");
        return 0;
    }
    *oid = PyTuple_GET_ITEM(item, 0);
    *stored = PyTuple_GET_ITEM(item, 1);
    return 1;
}

static PyObject *frame(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *objects, *crcs, *into;
    if (!PyArg_ParseTuple(args, "OOO!", &objects, &crcs, &PyByteArray_Type, &into))
        return NULL;
    PyObject *seq = PySequence_Fast(objects, "objects must be a sequence");
    PyObject *crc_seq = NULL, *out = NULL;
    if (!seq) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (crcs != Py_None) {
        crc_seq = PySequence_Fast(crcs, "crcs must be a sequence");
        if (!crc_seq) goto done;
        if (PySequence_Fast_GET_SIZE(crc_seq) != count) {
            PyErr_SetString(PyExc_ValueError, "one crc per object");
            goto done;
        }
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *oid, *stored;
        if (!object_parts(PySequence_Fast_GET_ITEM(seq, i), &oid, &stored)) goto done;
        total += RECORD_HEADER + PyBytes_GET_SIZE(stored);
    }
    /* grown, never shrunk: its memory is written again batch after batch, not fresh pages */
    if (PyByteArray_GET_SIZE(into) < total && PyByteArray_Resize(into, total) < 0) goto done;
    unsigned char *at = (unsigned char *)PyByteArray_AS_STRING(into);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *oid, *stored;
        object_parts(PySequence_Fast_GET_ITEM(seq, i), &oid, &stored);
        const unsigned char *content = (const unsigned char *)PyBytes_AS_STRING(stored);
        size_t length = (size_t)PyBytes_GET_SIZE(stored);
        uint32_t crc;
        if (crc_seq) {
            unsigned long given = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(crc_seq, i));
            if (PyErr_Occurred()) goto done;
            crc = (uint32_t)given;
        } else {
            crc = record_crc_of((const unsigned char *)PyBytes_AS_STRING(oid), content, length);
        }
        memcpy(at, PyBytes_AS_STRING(oid), OID_SIZE);
        for (int b = 0; b < 8; b++) at[OID_SIZE + b] = (unsigned char)((uint64_t)length >> (8 * b));
        for (int b = 0; b < 4; b++) at[OID_SIZE + 8 + b] = (unsigned char)(crc >> (8 * b));
        memcpy(at + RECORD_HEADER, content, length);
        at += RECORD_HEADER + length;
    }
    out = PyLong_FromSsize_t(total);
done:
    Py_DECREF(seq);
    Py_XDECREF(crc_seq);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, start: int, entries) -> list | int\n"
     "Each record of `entries` ((oid, offset, length)) in `data` (the pack's bytes from\n"
     "`start`) with its framing and envelope header checked, as [(oid, stored, crc, refs)];\n"
     "or the index of the first record that fails a check."},
    {"crc32", crc32, METH_VARARGS,
     "crc32(data, value=0) -> int\nzlib.crc32, the same results."},
    {"record_crc", record_crc, METH_VARARGS,
     "record_crc(oid, stored) -> int\nThe crc of a pack record (packfile.record_crc)."},
    {"frame", frame, METH_VARARGS,
     "frame(objects, crcs, into: bytearray) -> int\n"
     "The pack records of `objects` ((oid, stored) pairs), one after another, written at\n"
     "the start of `into` (grown to hold them, never shrunk); returns their size. `crcs`:\n"
     "each record's crc as record_crc gives it, or None to compute them here."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    make_crc_tables();
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return PyModule_Create(&module);
}
