/* checkpoints._dirscan: list and lstat a batch of directories in parallel, without the GIL.
 *
 * The walk of a no-change snapshot is one listing and one lstat per entry; in Python that is a
 * DirEntry and a stat_result per entry, which dominates the scan of a large tree. Here each
 * directory becomes one bytes "listing": its entries sorted by name, each a fixed header
 * (little-endian: u16 name length, u32 mode, u64 size, i64 mtime_ns, i64 ctime_ns, u64 inode)
 * followed by the name. An unchanged directory gives the same listing byte for byte, so the
 * scanner compares one bytes object against its stat cache instead of every entry.
 *
 * `walk_dirs` goes further for a scan that has a stat cache: given each known directory's
 * cached listing and the names of the subdirectories it captured, it walks whole unchanged
 * subtrees by itself, on all threads at once (no barrier per level), and hands back only the
 * directories whose listing differs or is not known. Those are the ones that need Python.
 *
 * `linked_dirs` tells which directories hold a file of more than one link (a file watcher cannot
 * see a write through a link outside the watched tree).
 *
 * `listing_changes` compares two listings of one directory: the entries that differ are the
 * only ones a scan must look at when it knows what the old listing stood for.
 *
 * The format and its pure-Python twins live in checkpoints/snapshot/dirlisting.py, which is the only
 * caller; this file knows nothing of ignore rules or trees: a "known" entry is two byte
 * strings, compared and split, never interpreted.
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
#include <sched.h>
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
    void (*one)(Job *); /* what each job is: scan_one or linked_one */
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

/* The job's directory, opened without following a symlink; NULL with job->err set. */
static DIR *open_dir(Job *job, int *fd) {
    *fd = open(job->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0) {
        job->err = errno;
        return NULL;
    }
    DIR *dir = fdopendir(*fd);
    if (!dir) {
        job->err = errno;
        close(*fd);
    }
    return dir;
}

static void scan_one(Job *job) {
    int fd;
    DIR *dir = open_dir(job, &fd);
    if (!dir) return;
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
        batch->one(&batch->jobs[index]);
    }
}

/* Start `count` helper threads running fn(arg); returns how many started. The scheduler places
 * a new thread by fork balancing, which (2 vCPUs, a caller just woken by its harness) often
 * chose the caller's own CPU: the helper then waited ~4 ms for a turn there, the other CPU
 * idle, and the walk ran as if on one thread (perf sched, bench no-op restore: a 7 ms walk
 * instead of 3.9). So a helper may run wherever this thread may, but not on its CPU of the
 * moment; where that cannot be said, where it is placed is the scheduler's. */
static int start_helpers(pthread_t *helpers, int count, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr;
    pthread_attr_t *placed = NULL;
#ifdef __linux__
    cpu_set_t allowed;
    int here = count > 0 ? sched_getcpu() : -1;
    if (here >= 0 && sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
        CPU_ISSET(here, &allowed) && CPU_COUNT(&allowed) > 1 && pthread_attr_init(&attr) == 0) {
        CPU_CLR(here, &allowed);
        if (pthread_attr_setaffinity_np(&attr, sizeof(allowed), &allowed) == 0)
            placed = &attr;
        else
            pthread_attr_destroy(&attr);
    }
#endif
    int started = 0;
    for (int t = 0; t < count; t++) {
        if (pthread_create(&helpers[started], placed, fn, arg) == 0 ||
            (placed && pthread_create(&helpers[started], NULL, fn, arg) == 0))
            started++;
    }
    if (placed) pthread_attr_destroy(placed);
    return started;
}

/* The jobs of a batch of directory paths (bytes; `*paths` keeps them alive), or NULL with an
 * exception set. */
static Job *batch_jobs(PyObject *seq, PyObject **paths, Py_ssize_t *count) {
    *paths = PySequence_Fast(seq, "paths must be a sequence of bytes");
    if (!*paths) return NULL;
    *count = PySequence_Fast_GET_SIZE(*paths);
    Job *jobs = PyMem_Calloc(*count ? (size_t)*count : 1, sizeof(Job));
    if (!jobs) {
        Py_CLEAR(*paths);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(*paths, i);
        if (!PyBytes_Check(item)) {
            PyMem_Free(jobs);
            Py_CLEAR(*paths);
            PyErr_SetString(PyExc_TypeError, "paths must be bytes");
            return NULL;
        }
        jobs[i].path = PyBytes_AS_STRING(item);
        jobs[i].newest = INT64_MIN;
    }
    return jobs;
}

/* Run `one` on every job, on up to `threads` threads (this one included), without the GIL. */
static void run_batch(Job *jobs, Py_ssize_t count, int threads, void (*one)(Job *)) {
    Batch batch = {jobs, (size_t)count, 0, PTHREAD_MUTEX_INITIALIZER, one};
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if ((Py_ssize_t)threads > count) threads = count > 0 ? (int)count : 1;
    Py_BEGIN_ALLOW_THREADS
    pthread_t helpers[64];
    int started = start_helpers(helpers, threads - 1, worker, &batch);
    worker(&batch); /* this thread works too; with no helper it does everything */
    for (int t = 0; t < started; t++) pthread_join(helpers[t], NULL);
    Py_END_ALLOW_THREADS
}

static PyObject *scan_dirs(PyObject *self, PyObject *args) {
    PyObject *seq, *paths;
    int threads;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "Oi", &seq, &threads)) return NULL;
    Job *jobs = batch_jobs(seq, &paths, &count);
    if (!jobs) return NULL;
    run_batch(jobs, count, threads, scan_one);
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

/* ---- linked_dirs ----------------------------------------------------------------------- */

/* Whether a directory holds a non-directory entry of more than one link (job->newest: 1 or 0;
 * job->err: why it could not be read). Entries the directory says are directories are not
 * stat'ed. */
static void linked_one(Job *job) {
    job->newest = 0;
    int fd;
    DIR *dir = open_dir(job, &fd);
    if (!dir) return;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(dir);
        if (!de) {
            job->err = errno;
            break;
        }
        if (de->d_type == DT_DIR) continue;
        const char *name = de->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        struct stat st;
        if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
            st.st_nlink > 1) {
            job->newest = 1;
            break;
        }
    }
    closedir(dir);
}

static PyObject *linked_dirs(PyObject *self, PyObject *args) {
    PyObject *seq, *paths;
    int threads;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "Oi", &seq, &threads)) return NULL;
    Job *jobs = batch_jobs(seq, &paths, &count);
    if (!jobs) return NULL;
    run_batch(jobs, count, threads, linked_one);
    PyObject *result = PyList_New(count);
    for (Py_ssize_t i = 0; result && i < count; i++) {
        PyObject *item = jobs[i].err ? PyLong_FromLong(jobs[i].err) : PyBool_FromLong(jobs[i].newest == 1);
        if (!item) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, item);
    }
    PyMem_Free(jobs);
    Py_DECREF(paths);
    return result;
}

/* ---- walk_dirs ------------------------------------------------------------------------- */

typedef struct {
    const char *key;
    size_t klen;
    const char *listing;
    size_t llen;
    const char *names; /* subdirectory names, NUL-separated */
    size_t nlen;
} Known;

typedef struct {
    char *key; /* malloc'ed; handed to the result it ends in */
    size_t klen;
    char *path;
    size_t plen;
    int shortcut; /* may an equal listing stand for the whole directory? */
} Node;

typedef struct {
    char *key;
    size_t klen;
    Job job; /* err or buf/len/newest */
} Report;

typedef struct {
    Known *slots;
    size_t mask; /* slots - 1; 0 when nothing is known */
    Node *queue;
    size_t qlen, qcap;
    size_t active; /* nodes taken but not finished */
    Report *reports;
    size_t nreports, capreports;
    Node *same; /* unchanged directories (only their keys are kept) */
    size_t nsame, capsame;
    int nomem;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} Walk;

static uint64_t hash_key(const char *key, size_t len) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

static const Known *find_known(const Walk *w, const char *key, size_t len) {
    if (!w->mask) return NULL;
    for (size_t i = hash_key(key, len) & w->mask;; i = (i + 1) & w->mask) {
        const Known *k = &w->slots[i];
        if (!k->key) return NULL;
        if (k->klen == len && memcmp(k->key, key, len) == 0) return k;
    }
}

/* The names of `known` are plain: not empty, no '/', not "." or "..". Checked before any is
 * joined to a path, so a damaged entry can never lead the walk outside the tree. */
static int plain_names(const Known *known) {
    const char *p = known->names, *end = p + known->nlen;
    while (p < end) {
        const char *stop = memchr(p, 0, (size_t)(end - p));
        size_t len = stop ? (size_t)(stop - p) : (size_t)(end - p);
        if (!len || memchr(p, '/', len) || (p[0] == '.' && (len == 1 || (len == 2 && p[1] == '.'))))
            return 0;
        p += len + 1;
    }
    return 1;
}

static char *joined(const char *a, size_t alen, const char *b, size_t blen, int sep, size_t *out) {
    size_t len = alen + (sep ? 1 : 0) + blen;
    char *s = malloc(len + 1);
    if (!s) return NULL;
    memcpy(s, a, alen);
    if (sep) s[alen] = '/';
    memcpy(s + alen + (sep ? 1 : 0), b, blen);
    s[len] = 0;
    *out = len;
    return s;
}

/* Children of an unchanged directory, as nodes; 0 on success. */
static int children_of(const Node *n, const Known *known, Node **out, size_t *count) {
    size_t cap = 0, used = 0;
    Node *kids = NULL;
    const char *p = known->names, *end = p + known->nlen;
    while (p < end) {
        const char *stop = memchr(p, 0, (size_t)(end - p));
        size_t len = stop ? (size_t)(stop - p) : (size_t)(end - p);
        if (used == cap) {
            Node *grown = realloc(kids, (cap = cap ? 2 * cap : 8) * sizeof(Node));
            if (!grown) goto fail;
            kids = grown;
        }
        Node *kid = &kids[used];
        kid->key = joined(n->key, n->klen, p, len, n->klen > 0, &kid->klen);
        kid->path = joined(n->path, n->plen, p, len, 1, &kid->plen);
        kid->shortcut = 1;
        if (!kid->key || !kid->path) {
            free(kid->key);
            free(kid->path);
            goto fail;
        }
        used++;
        p += len + 1;
    }
    *out = kids;
    *count = used;
    return 0;
fail:
    for (size_t i = 0; i < used; i++) {
        free(kids[i].key);
        free(kids[i].path);
    }
    free(kids);
    return ENOMEM;
}

static int grow(void **items, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t next = *cap ? *cap : 64;
    while (next < need) next *= 2;
    void *grown = realloc(*items, next * size);
    if (!grown) return ENOMEM;
    *items = grown;
    *cap = next;
    return 0;
}

/* Scan one node; called without the lock. Fills either `report` (returns 1) or the
 * children of an unchanged directory (returns 0). */
static int visit(Walk *w, Node *n, Report *report, Node **kids, size_t *nkids) {
    Job job = {0};
    job.path = n->path;
    job.newest = INT64_MIN;
    scan_one(&job);
    *kids = NULL;
    *nkids = 0;
    if (!job.err && n->shortcut) {
        const Known *known = find_known(w, n->key, n->klen);
        if (known && known->llen && known->llen == job.len &&
            memcmp(known->listing, job.buf, job.len) == 0 && plain_names(known) &&
            children_of(n, known, kids, nkids) == 0) {
            free(job.buf);
            return 0;
        }
    }
    report->key = n->key;
    report->klen = n->klen;
    report->job = job;
    report->job.path = NULL;
    return 1;
}

static void *walker(void *arg) {
    Walk *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->qlen == 0 && w->active > 0) pthread_cond_wait(&w->cond, &w->lock);
        if (w->qlen == 0) break; /* nothing queued, nobody working: done */
        Node n = w->queue[--w->qlen]; /* last in, first out: the queue stays short */
        w->active++;
        pthread_mutex_unlock(&w->lock);

        Report report;
        Node *kids;
        size_t nkids;
        int reported = visit(w, &n, &report, &kids, &nkids);

        pthread_mutex_lock(&w->lock);
        if (reported) {
            if (grow((void **)&w->reports, &w->capreports, w->nreports + 1, sizeof(Report))) {
                w->nomem = 1;
                free(report.key);
                free(report.job.buf);
            } else {
                w->reports[w->nreports++] = report;
            }
        } else {
            int failed = grow((void **)&w->same, &w->capsame, w->nsame + 1, sizeof(Node));
            if (!failed) failed = grow((void **)&w->queue, &w->qcap, w->qlen + nkids, sizeof(Node));
            if (failed) {
                w->nomem = 1;
                free(n.key);
                for (size_t i = 0; i < nkids; i++) {
                    free(kids[i].key);
                    free(kids[i].path);
                }
            } else {
                w->same[w->nsame++] = (Node){n.key, n.klen, NULL, 0, 0};
                memcpy(w->queue + w->qlen, kids, nkids * sizeof(Node));
                w->qlen += nkids;
            }
            free(kids);
        }
        free(n.path);
        w->active--;
        if (w->qlen || w->active == 0) pthread_cond_broadcast(&w->cond);
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Fill the table of known directories from the dict {key: (listing, names, ...)}; entries of
 * any other shape are left out (they are simply not shortcuts). */
static int fill_known(Walk *w, PyObject *known) {
    Py_ssize_t count = PyDict_Size(known);
    size_t size = 16;
    while (size < 2 * (size_t)count) size *= 2;
    w->slots = PyMem_Calloc(size, sizeof(Known));
    if (!w->slots) return -1;
    w->mask = size - 1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(known, &pos, &key, &value)) {
        if (!PyBytes_Check(key) || !(PyList_Check(value) || PyTuple_Check(value)) ||
            PySequence_Fast_GET_SIZE(value) < 2)
            continue;
        PyObject *listing = PySequence_Fast_GET_ITEM(value, 0);
        PyObject *names = PySequence_Fast_GET_ITEM(value, 1);
        if (!PyBytes_Check(listing) || !PyBytes_Check(names)) continue;
        Known k = {PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key),
                   PyBytes_AS_STRING(listing), (size_t)PyBytes_GET_SIZE(listing),
                   PyBytes_AS_STRING(names), (size_t)PyBytes_GET_SIZE(names)};
        size_t i = hash_key(k.key, k.klen) & w->mask;
        while (w->slots[i].key) i = (i + 1) & w->mask;
        w->slots[i] = k;
    }
    return 0;
}

static void free_walk(Walk *w) {
    for (size_t i = 0; i < w->qlen; i++) {
        free(w->queue[i].key);
        free(w->queue[i].path);
    }
    for (size_t i = 0; i < w->nreports; i++) {
        free(w->reports[i].key);
        free(w->reports[i].job.buf);
    }
    for (size_t i = 0; i < w->nsame; i++) free(w->same[i].key);
    free(w->queue);
    free(w->reports);
    free(w->same);
    PyMem_Free(w->slots);
}

static PyObject *walk_results(Walk *w) {
    PyObject *reports = PyList_New((Py_ssize_t)w->nreports);
    PyObject *same = PyList_New((Py_ssize_t)w->nsame);
    if (!reports || !same) goto fail;
    for (size_t i = 0; i < w->nreports; i++) {
        Report *r = &w->reports[i];
        PyObject *item = r->job.err
            ? Py_BuildValue("(y#i)", r->key, (Py_ssize_t)r->klen, r->job.err)
            : Py_BuildValue("(y#(y#L))", r->key, (Py_ssize_t)r->klen, r->job.buf,
                            (Py_ssize_t)r->job.len, (long long)r->job.newest);
        if (!item) goto fail;
        PyList_SET_ITEM(reports, (Py_ssize_t)i, item);
    }
    for (size_t i = 0; i < w->nsame; i++) {
        PyObject *item = PyBytes_FromStringAndSize(w->same[i].key, (Py_ssize_t)w->same[i].klen);
        if (!item) goto fail;
        PyList_SET_ITEM(same, (Py_ssize_t)i, item);
    }
    return Py_BuildValue("(NN)", reports, same);
fail:
    Py_XDECREF(reports);
    Py_XDECREF(same);
    return NULL;
}

static PyObject *walk_dirs(PyObject *self, PyObject *args) {
    PyObject *seq, *known;
    int threads;
    if (!PyArg_ParseTuple(args, "OOi", &seq, &known, &threads)) return NULL;
    if (known != Py_None && !PyDict_Check(known)) {
        PyErr_SetString(PyExc_TypeError, "known must be a dict or None");
        return NULL;
    }
    PyObject *starts = PySequence_Fast(seq, "starts must be a sequence of (key, path, shortcut)");
    if (!starts) return NULL;
    Walk w = {0};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    PyObject *result = NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(starts);
    if (known != Py_None && fill_known(&w, known) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (grow((void **)&w.queue, &w.qcap, (size_t)count, sizeof(Node))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(starts, i);
        PyObject *key, *path;
        int shortcut;
        if (!PyArg_ParseTuple(item, "SSp", &key, &path, &shortcut)) goto done;
        Node *n = &w.queue[w.qlen];
        n->key = joined(PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key), "", 0, 0, &n->klen);
        n->path = joined(PyBytes_AS_STRING(path), (size_t)PyBytes_GET_SIZE(path), "", 0, 0, &n->plen);
        n->shortcut = shortcut;
        if (!n->key || !n->path) {
            free(n->key);
            free(n->path);
            PyErr_NoMemory();
            goto done;
        }
        w.qlen++;
    }
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    /* `known` and its bytes must outlive the walk; the dict is only read, by C, under our
     * reference, and no Python code runs until the threads are joined. */
    Py_XINCREF(known);
    Py_BEGIN_ALLOW_THREADS
    pthread_t helpers[64];
    int started = start_helpers(helpers, threads - 1, walker, &w);
    walker(&w);
    for (int t = 0; t < started; t++) pthread_join(helpers[t], NULL);
    Py_END_ALLOW_THREADS
    Py_XDECREF(known);
    if (w.nomem) {
        PyErr_NoMemory();
        goto done;
    }
    result = walk_results(&w);
done:
    free_walk(&w);
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    Py_DECREF(starts);
    return result;
}

/* ---- listing_changes ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    size_t len;
    const char *header;
} Cursor;

/* The entry at `*offset` of `listing`; 0 at the end, -1 if the listing is malformed. */
static int next_entry(const char *listing, size_t size, size_t *offset, Cursor *out) {
    if (*offset == size) return 0;
    if (size - *offset < HEADER) return -1;
    const unsigned char *h = (const unsigned char *)listing + *offset;
    size_t len = (size_t)h[0] | ((size_t)h[1] << 8);
    if (size - *offset - HEADER < len) return -1;
    out->header = listing + *offset;
    out->name = out->header + HEADER;
    out->len = len;
    *offset += HEADER + len;
    return 1;
}

static uint64_t get_le(const char *in, int bytes) {
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; i--) value = (value << 8) | (unsigned char)in[i];
    return value;
}

static PyObject *entry_tuple(const Cursor *c) {
    return Py_BuildValue("(y#kKLLK)", c->name, (Py_ssize_t)c->len,
                         (unsigned long)get_le(c->header + 2, 4),
                         (unsigned long long)get_le(c->header + 6, 8),
                         (long long)(int64_t)get_le(c->header + 14, 8),
                         (long long)(int64_t)get_le(c->header + 22, 8),
                         (unsigned long long)get_le(c->header + 30, 8));
}

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

static PyObject *listing_changes(PyObject *self, PyObject *args) {
    const char *old, *new;
    Py_ssize_t old_size, new_size;
    if (!PyArg_ParseTuple(args, "y#y#", &old, &old_size, &new, &new_size)) return NULL;
    PyObject *changed = PyList_New(0), *gone = PyList_New(0);
    if (!changed || !gone) goto fail;
    size_t at_old = 0, at_new = 0;
    Cursor a = {0}, b = {0};
    int has_a = next_entry(old, (size_t)old_size, &at_old, &a);
    int has_b = next_entry(new, (size_t)new_size, &at_new, &b);
    while (has_a || has_b) {
        if (has_a < 0 || has_b < 0) {
            PyErr_SetString(PyExc_ValueError, "malformed listing");
            goto fail;
        }
        int order;
        if (has_a <= 0) {
            order = 1;
        } else if (has_b <= 0) {
            order = -1;
        } else {
            size_t n = a.len < b.len ? a.len : b.len;
            order = memcmp(a.name, b.name, n);
            if (!order) order = (a.len > b.len) - (a.len < b.len);
        }
        if (order < 0) { /* only in the old listing */
            if (append_new(gone, PyBytes_FromStringAndSize(a.name, (Py_ssize_t)a.len))) goto fail;
            has_a = next_entry(old, (size_t)old_size, &at_old, &a);
        } else if (order > 0) { /* only in the new one */
            if (append_new(changed, entry_tuple(&b))) goto fail;
            has_b = next_entry(new, (size_t)new_size, &at_new, &b);
        } else {
            if (memcmp(a.header, b.header, HEADER) != 0 && append_new(changed, entry_tuple(&b)))
                goto fail;
            has_a = next_entry(old, (size_t)old_size, &at_old, &a);
            has_b = next_entry(new, (size_t)new_size, &at_new, &b);
        }
    }
    return Py_BuildValue("(NN)", changed, gone);
fail:
    Py_XDECREF(changed);
    Py_XDECREF(gone);
    return NULL;
}

/* ---- patch_listing -------------------------------------------------------------------- */

static int name_order(const char *a, size_t alen, const char *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int order = memcmp(a, b, n);
    return order ? order : (alen > blen) - (alen < blen);
}

static PyObject *patch_listing(PyObject *self, PyObject *args) {
    const char *old;
    Py_ssize_t old_size;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "y#O", &old, &old_size, &seq)) return NULL;
    PyObject *changes = PySequence_Fast(seq, "changes must be a sequence of (name, entry or None)");
    if (!changes) return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(changes);
    size_t bound = (size_t)old_size;
    const char *last = NULL;
    size_t last_len = 0;
    for (Py_ssize_t i = 0; i < count; i++) { /* checked first: a bad change leaves nothing made */
        PyObject *item = PySequence_Fast_GET_ITEM(changes, i);
        PyObject *name, *entry;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_Check(name = PyTuple_GET_ITEM(item, 0)) ||
            ((entry = PyTuple_GET_ITEM(item, 1)) != Py_None && !PyBytes_Check(entry))) {
            PyErr_SetString(PyExc_TypeError, "each change must be (bytes, bytes or None)");
            goto done;
        }
        const char *n = PyBytes_AS_STRING(name);
        size_t len = (size_t)PyBytes_GET_SIZE(name);
        if (last && name_order(last, last_len, n, len) >= 0) {
            PyErr_SetString(PyExc_ValueError, "changes must be in strictly increasing name order");
            goto done;
        }
        last = n;
        last_len = len;
        if (entry != Py_None) {
            size_t size = (size_t)PyBytes_GET_SIZE(entry), at = 0;
            Cursor c;
            if (next_entry(PyBytes_AS_STRING(entry), size, &at, &c) != 1 || at != size ||
                c.len != len || memcmp(c.name, n, len) != 0) {
                PyErr_SetString(PyExc_ValueError, "a change's entry must be one entry of its name");
                goto done;
            }
            bound += size;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
    if (!out) goto done;
    char *dest = PyBytes_AS_STRING(out);
    size_t at = 0, copied = 0, used = 0;
    Cursor a;
    int has = next_entry(old, (size_t)old_size, &at, &a);
    for (Py_ssize_t i = 0; i <= count; i++) {
        PyObject *item = i < count ? PySequence_Fast_GET_ITEM(changes, i) : NULL;
        const char *n = item ? PyBytes_AS_STRING(PyTuple_GET_ITEM(item, 0)) : NULL;
        size_t len = item ? (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 0)) : 0;
        /* old entries before this change's name (all of them after the last change) */
        while (has > 0 && (!item || name_order(a.name, a.len, n, len) < 0))
            has = next_entry(old, (size_t)old_size, &at, &a);
        if (has < 0) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_ValueError, "malformed listing");
            goto done;
        }
        size_t upto = has > 0 ? (size_t)(a.header - old) : (size_t)old_size;
        memcpy(dest + used, old + copied, upto - copied);
        used += upto - copied;
        copied = upto;
        if (!item) break;
        if (has > 0 && name_order(a.name, a.len, n, len) == 0) { /* replaced or dropped */
            copied = at;
            has = next_entry(old, (size_t)old_size, &at, &a);
        }
        PyObject *entry = PyTuple_GET_ITEM(item, 1);
        if (entry != Py_None) {
            memcpy(dest + used, PyBytes_AS_STRING(entry), (size_t)PyBytes_GET_SIZE(entry));
            used += (size_t)PyBytes_GET_SIZE(entry);
        }
    }
    if (used != bound && _PyBytes_Resize(&out, (Py_ssize_t)used) < 0) goto done;
    result = out;
done:
    Py_DECREF(changes);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_dirs", scan_dirs, METH_VARARGS,
     "scan_dirs(paths: list[bytes], threads: int) -> list[tuple[bytes, int] | int]\n"
     "Per directory: (listing, newest mtime/ctime in ns) or the errno that stopped it."},
    {"linked_dirs", linked_dirs, METH_VARARGS,
     "linked_dirs(paths, threads) -> [True | False | errno]: whether each directory holds a "
     "non-directory entry of more than one link"},
    {"walk_dirs", walk_dirs, METH_VARARGS,
     "walk_dirs(starts: list[tuple[bytes, bytes, bool]], known: dict | None, threads: int)\n"
     "    -> tuple[list[tuple[bytes, tuple[bytes, int] | int]], list[bytes]]\n"
     "From each (key, path, shortcut): a directory whose listing equals known[key][0] (and\n"
     "shortcut is true) is unchanged: its key is listed and the subdirectories named in\n"
     "known[key][1] (NUL-separated) are walked the same way. Every other directory is\n"
     "reported as (key, (listing, newest) or errno) and not descended into."},
    {"listing_changes", listing_changes, METH_VARARGS,
     "listing_changes(old: bytes, new: bytes)\n"
     "    -> tuple[list[tuple[bytes, int, int, int, int, int]], list[bytes]]\n"
     "The entries of `new` that are not in `old` byte for byte, as (name, mode, size,\n"
     "mtime_ns, ctime_ns, inode), and the names of `old` that `new` lacks; in name order.\n"
     "ValueError if either listing is malformed."},
    {"patch_listing", patch_listing, METH_VARARGS,
     "patch_listing(listing: bytes, changes: Sequence[tuple[bytes, bytes | None]]) -> bytes\n"
     "`listing` with each named entry replaced by (or, where missing, given) the change's\n"
     "entry, a listing of one entry of that name, or dropped where the change is None.\n"
     "Changes in strictly increasing name order; ValueError otherwise, or if the listing or\n"
     "an entry is malformed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dirscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__dirscan(void) { return PyModule_Create(&module); }
