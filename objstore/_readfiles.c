/* objstore._readfiles: read many whole regular files, the GIL released.
 *
 * `read_files(paths, limit, budget)` reads files from the start of `paths` (bytes) until
 * `budget` bytes are held (at least one file) and returns one outcome per file taken, in order:
 *   - (content, FileStat): read whole, unchanged while read (the fstat after reading matches
 *     the one before in size, mtime, ctime and inode, and no byte beyond that size came);
 *   - (None, FileStat): a regular file larger than `limit`, not read (the caller streams it);
 *   - an int: the errno that stopped it, NOT_REGULAR for something other than a regular
 *     file, CHANGED for a file that changed while it was read.
 * Files are opened as ObjectStore.put_file opens them: O_NOFOLLOW (a symlink is never
 * followed: ELOOP) and O_NONBLOCK (a FIFO never waits for a writer). A batch holds its files
 * open together; when that runs out of descriptors (EMFILE), it ends before the file that
 * could not be opened, so that only a file that cannot be opened alone reports EMFILE.
 *
 * Why: a first snapshot reads every file on one thread, the critical path, and from Python
 * each file costs five calls (open, fstat, read, fstat, close), each releasing and taking the
 * GIL, and two os.stat_result objects. Here a batch costs two GIL releases: open and fstat
 * every file, allocate the bytes objects (GIL held, so contents land in them without a copy),
 * then read, fstat again and close. This file knows nothing of ids, hashing or stores.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

#define NOT_REGULAR (-1)
#define CHANGED (-2)

static PyStructSequence_Field stat_fields[] = {
    {"st_mode", NULL}, {"st_size", NULL}, {"st_mtime_ns", NULL},
    {"st_ctime_ns", NULL}, {"st_ino", NULL}, {NULL, NULL},
};
static PyStructSequence_Desc stat_desc = {
    "objstore._readfiles.FileStat",
    "What fstat said of a file before it was read, in os.stat_result's names.",
    stat_fields, 5,
};
static PyTypeObject *FileStatType;

typedef struct {
    const char *path;
    int fd;
    int err; /* errno, NOT_REGULAR or CHANGED; 0 while fine */
    int large;
    struct stat st;
    PyObject *data; /* bytes of st_size + 1 (one byte more shows growth) */
    Py_ssize_t got;
} Item;

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

#ifdef __APPLE__
#define MTIM(st) ((st)->st_mtimespec)
#define CTIM(st) ((st)->st_ctimespec)
#else
#define MTIM(st) ((st)->st_mtim)
#define CTIM(st) ((st)->st_ctim)
#endif

static int same_state(const struct stat *a, const struct stat *b) {
    return a->st_size == b->st_size && ns_of(MTIM(a)) == ns_of(MTIM(b)) &&
           ns_of(CTIM(a)) == ns_of(CTIM(b)) && a->st_ino == b->st_ino;
}

static void open_one(Item *it, long long limit) {
    do {
        it->fd = open(it->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    } while (it->fd < 0 && errno == EINTR);
    if (it->fd < 0) {
        it->err = errno;
        return;
    }
    if (fstat(it->fd, &it->st) != 0) {
        it->err = errno;
    } else if (!S_ISREG(it->st.st_mode)) {
        it->err = NOT_REGULAR;
    } else if ((long long)it->st.st_size > limit) {
        it->large = 1;
    } else {
        return; /* to be read: the descriptor stays open */
    }
    close(it->fd);
    it->fd = -1;
}

static void read_one(Item *it) {
    char *buf = PyBytes_AS_STRING(it->data);
    Py_ssize_t want = (Py_ssize_t)it->st.st_size + 1;
    while (it->got < want) {
        ssize_t n = read(it->fd, buf + it->got, (size_t)(want - it->got));
        if (n < 0) {
            if (errno == EINTR) continue;
            it->err = errno;
            break;
        }
        if (n == 0) break;
        it->got += n;
    }
    struct stat after;
    if (!it->err) {
        if (fstat(it->fd, &after) != 0)
            it->err = errno;
        else if (it->got != (Py_ssize_t)it->st.st_size || !same_state(&it->st, &after))
            it->err = CHANGED;
    }
    close(it->fd);
    it->fd = -1;
}

static PyObject *file_stat(const struct stat *st) {
    PyObject *stat = PyStructSequence_New(FileStatType);
    if (!stat) return NULL;
    PyObject *values[5] = {
        PyLong_FromUnsignedLong((unsigned long)st->st_mode),
        PyLong_FromLongLong((long long)st->st_size),
        PyLong_FromLongLong((long long)ns_of(MTIM(st))),
        PyLong_FromLongLong((long long)ns_of(CTIM(st))),
        PyLong_FromUnsignedLongLong((unsigned long long)st->st_ino),
    };
    int failed = 0;
    for (int i = 0; i < 5; i++) {
        if (!values[i]) failed = 1;
        PyStructSequence_SET_ITEM(stat, i, values[i] ? values[i] : Py_NewRef(Py_None));
    }
    if (failed) {
        Py_DECREF(stat);
        return NULL;
    }
    return stat;
}

static PyObject *outcome(Item *it) {
    if (it->err) return PyLong_FromLong(it->err);
    PyObject *stat = file_stat(&it->st);
    if (!stat) return NULL;
    PyObject *content;
    if (it->large) {
        content = Py_NewRef(Py_None);
    } else {
        if (_PyBytes_Resize(&it->data, it->got) != 0) { /* frees and clears it->data */
            Py_DECREF(stat);
            return NULL;
        }
        content = it->data;
        it->data = NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (!pair) {
        Py_DECREF(content);
        Py_DECREF(stat);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, content);
    PyTuple_SET_ITEM(pair, 1, stat);
    return pair;
}

static PyObject *read_files(PyObject *self, PyObject *args) {
    PyObject *seq;
    long long limit, budget;
    if (!PyArg_ParseTuple(args, "OLL", &seq, &limit, &budget)) return NULL;
    /* A tuple of its own: the paths' buffers are used without the GIL. */
    PyObject *paths = PySequence_Tuple(seq);
    if (!paths) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(paths);
    Item *items = calloc(count ? (size_t)count : 1, sizeof(Item));
    if (!items) {
        Py_DECREF(paths);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *path = PyTuple_GET_ITEM(paths, i);
        if (!PyBytes_Check(path) || (Py_ssize_t)strlen(PyBytes_AS_STRING(path)) !=
                                        PyBytes_GET_SIZE(path)) {
            free(items);
            Py_DECREF(paths);
            return PyErr_Format(PyExc_ValueError,
                                "paths must be bytes without NUL, not %.100s",
                                Py_TYPE(path)->tp_name);
        }
        items[i].path = PyBytes_AS_STRING(path);
        items[i].fd = -1;
    }
    /* Open and fstat until the budget is held (at least one file). */
    Py_ssize_t taken = 0;
    long long held = 0;
    Py_BEGIN_ALLOW_THREADS
    while (taken < count && (taken == 0 || held < budget)) {
        Item *it = &items[taken++];
        open_one(it, limit);
        if ((it->err == EMFILE || it->err == ENFILE) && taken > 1) {
            /* Out of descriptors because this batch holds some: the file is left to the next
             * call, which starts with them closed, rather than reported unreadable. */
            it->err = 0;
            taken--;
            break;
        }
        if (!it->err && !it->large) held += (long long)it->st.st_size + 1;
    }
    Py_END_ALLOW_THREADS
    /* The bytes objects to read into. */
    int failed = 0;
    for (Py_ssize_t i = 0; i < taken && !failed; i++) {
        if (items[i].fd < 0) continue;
        items[i].data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)items[i].st.st_size + 1);
        if (!items[i].data) failed = 1;
    }
    /* Read, check, close. */
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < taken; i++)
            if (items[i].fd >= 0) read_one(&items[i]);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = failed ? NULL : PyList_New(taken);
    for (Py_ssize_t i = 0; i < taken; i++) {
        if (result) {
            PyObject *one = outcome(&items[i]);
            if (one) {
                PyList_SET_ITEM(result, i, one);
            } else {
                Py_CLEAR(result);
            }
        }
        if (items[i].fd >= 0) close(items[i].fd);
        Py_XDECREF(items[i].data);
    }
    free(items);
    Py_DECREF(paths);
    return result;
}

static PyMethodDef methods[] = {
    {"read_files", read_files, METH_VARARGS,
     "read_files(paths: Sequence[bytes], limit: int, budget: int) -> list\n"
     "Read whole regular files from the start of `paths` until `budget` bytes are held (at\n"
     "least one): per file taken, (content, FileStat), (None, FileStat) for a regular file\n"
     "larger than `limit`, or an int: errno, NOT_REGULAR (-1) or CHANGED (-2)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_readfiles", NULL, -1, methods};

PyMODINIT_FUNC PyInit__readfiles(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (!FileStatType) {
        FileStatType = PyStructSequence_NewType(&stat_desc);
        if (!FileStatType) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddIntConstant(m, "NOT_REGULAR", NOT_REGULAR) != 0 ||
        PyModule_AddIntConstant(m, "CHANGED", CHANGED) != 0 ||
        PyModule_AddObjectRef(m, "FileStat", (PyObject *)FileStatType) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
