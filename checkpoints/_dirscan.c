/* checkpoints._dirscan: list and lstat a batch of directories in parallel, without the GIL.
 *
 * The walk of a no-change snapshot is one listing and one lstat per entry; in Python that is a
 * DirEntry and a stat_result per entry, which dominates the scan of a large tree. Here each
 * directory becomes one bytes "listing": its entries sorted by name, each a fixed header
 * (little-endian: u16 name length, u32 mode, u64 size, i64 mtime_ns, i64 ctime_ns, u64 inode)
 * followed by the name. An unchanged directory gives the same listing byte for byte, so the
 * scanner compares one bytes object against its stat cache instead of every entry.
 *
 * The format and its pure-Python twin live in checkpoints/dirlisting.py, which is the only
 * caller; this file knows nothing of ignore rules, caches or trees.
 *
 * Rules: directories are opened with O_NOFOLLOW (a directory swapped for a symlink is an error,
 * never followed); entries are stat'ed with AT_SYMLINK_NOFOLLOW relative to the directory's fd;
 * an entry that vanishes between listing and stat is left out (it is not part of this state);
 * any other stat error is kept with mode 0 and the errno in the size field. A directory that
 * cannot be opened or read yields its errno as an int instead of a listing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER 38

typedef struct {
    char *name;
    size_t len;
    uint32_t mode;
    uint64_t size;
    int64_t mtime;
    int64_t ctime;
    uint64_t ino;
} Entry;

typedef struct {
    const char *path;
    char *buf; /* the listing, malloc'ed */
    size_t len;
    int err;
    int64_t newest; /* max(mtime, ctime) over the entries */
} Job;

typedef struct {
    Job *jobs;
    size_t count;
    size_t next;
    pthread_mutex_t lock;
} Batch;

static int by_name(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    return (x->len > y->len) - (x->len < y->len);
}

static void put_le(char *out, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (char)((value >> (8 * i)) & 0xff);
}

static void scan_one(Job *job) {
    int fd = open(job->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        job->err = errno;
        return;
    }
    DIR *dir = fdopendir(fd);
    if (!dir) {
        job->err = errno;
        close(fd);
        return;
    }
    size_t count = 0, cap = 64, total = 0;
    Entry *entries = malloc(cap * sizeof(Entry));
    int failed = entries ? 0 : ENOMEM;
    int64_t newest = INT64_MIN;
    for (;;) {
        if (failed) break;
        errno = 0;
        struct dirent *de = readdir(dir);
        if (!de) {
            failed = errno;
            break;
        }
        const char *name = de->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        size_t len = strlen(name);
        if (len > 0xffff) continue; /* no filesystem allows it; the format can't hold it */
        struct stat st;
        Entry e = {0};
        if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) continue; /* vanished: not part of this state */
            e.mode = 0;
            e.size = (uint64_t)errno;
        } else {
            e.mode = (uint32_t)st.st_mode;
            e.size = (uint64_t)st.st_size;
            e.mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
            e.ctime = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
            e.ino = (uint64_t)st.st_ino;
            if (e.mtime > newest) newest = e.mtime;
            if (e.ctime > newest) newest = e.ctime;
        }
        e.name = malloc(len);
        if (!e.name) {
            failed = ENOMEM;
            break;
        }
        memcpy(e.name, name, len);
        e.len = len;
        if (count == cap) {
            Entry *grown = realloc(entries, 2 * cap * sizeof(Entry));
            if (!grown) {
                free(e.name);
                failed = ENOMEM;
                break;
            }
            entries = grown;
            cap *= 2;
        }
        entries[count++] = e;
        total += HEADER + len;
    }
    closedir(dir);
    if (!failed) {
        qsort(entries, count, sizeof(Entry), by_name);
        job->buf = malloc(total ? total : 1);
        if (!job->buf) failed = ENOMEM;
    }
    if (!failed) {
        char *out = job->buf;
        for (size_t i = 0; i < count; i++) {
            Entry *e = &entries[i];
            put_le(out, e->len, 2);
            put_le(out + 2, e->mode, 4);
            put_le(out + 6, e->size, 8);
            put_le(out + 14, (uint64_t)e->mtime, 8);
            put_le(out + 22, (uint64_t)e->ctime, 8);
            put_le(out + 30, e->ino, 8);
            memcpy(out + HEADER, e->name, e->len);
            out += HEADER + e->len;
        }
        job->len = total;
        job->newest = newest;
    }
    for (size_t i = 0; i < count; i++) free(entries[i].name);
    free(entries);
    job->err = failed;
}

static void *worker(void *arg) {
    Batch *batch = arg;
    for (;;) {
        pthread_mutex_lock(&batch->lock);
        size_t index = batch->next++;
        pthread_mutex_unlock(&batch->lock);
        if (index >= batch->count) return NULL;
        scan_one(&batch->jobs[index]);
    }
}

static PyObject *scan_dirs(PyObject *self, PyObject *args) {
    PyObject *seq;
    int threads;
    if (!PyArg_ParseTuple(args, "Oi", &seq, &threads)) return NULL;
    PyObject *paths = PySequence_Fast(seq, "paths must be a sequence of bytes");
    if (!paths) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(paths);
    Job *jobs = PyMem_Calloc(count ? (size_t)count : 1, sizeof(Job));
    if (!jobs) {
        Py_DECREF(paths);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(paths, i);
        if (!PyBytes_Check(item)) {
            PyMem_Free(jobs);
            Py_DECREF(paths);
            PyErr_SetString(PyExc_TypeError, "paths must be bytes");
            return NULL;
        }
        jobs[i].path = PyBytes_AS_STRING(item); /* `paths` keeps the bytes alive */
        jobs[i].newest = INT64_MIN;
    }
    Batch batch = {jobs, (size_t)count, 0, PTHREAD_MUTEX_INITIALIZER};
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if ((Py_ssize_t)threads > count) threads = count > 0 ? (int)count : 1;
    Py_BEGIN_ALLOW_THREADS
    pthread_t helpers[64];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&helpers[started], NULL, worker, &batch) == 0) started++;
    }
    worker(&batch); /* this thread works too; with no helper it does everything */
    for (int t = 0; t < started; t++) pthread_join(helpers[t], NULL);
    Py_END_ALLOW_THREADS
    PyObject *result = PyList_New(count);
    for (Py_ssize_t i = 0; result && i < count; i++) {
        Job *job = &jobs[i];
        PyObject *item;
        if (job->err) {
            item = PyLong_FromLong(job->err);
        } else {
            item = Py_BuildValue("(y#L)", job->buf, (Py_ssize_t)job->len, (long long)job->newest);
        }
        if (!item) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, item);
    }
    for (Py_ssize_t i = 0; i < count; i++) free(jobs[i].buf);
    PyMem_Free(jobs);
    Py_DECREF(paths);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_dirs", scan_dirs, METH_VARARGS,
     "scan_dirs(paths: list[bytes], threads: int) -> list[tuple[bytes, int] | int]\n"
     "Per directory: (listing, newest mtime/ctime in ns) or the errno that stopped it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dirscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dirscan(void) { return PyModule_Create(&module); }
