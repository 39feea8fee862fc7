/* checkpoints._fsops: two file-system operations a restore needs and Python does not offer.
 *
 * `exchange(src, dst_dir_fd, dst)` swaps two names atomically (renameat2 RENAME_EXCHANGE):
 * a staged file takes the place of the workspace file it replaces, which lands under the
 * staged name. Renaming over the old file would free its blocks inside the rename, and ext4
 * would also start writing the new file's data back first (its "auto_da_alloc" guard for
 * replace-by-rename): measured on ext4, ~180 us per file against ~12 us for the exchange.
 * The old file is then freed with the staging directory, off the caller's thread.
 *
 * `write_files(dir_fd, items, stamp_ns)` creates, fills and dates a batch of new files in one
 * directory without the GIL, so that a restore's staging writes one batch on a thread while
 * the caller decodes the next: the kernel's file creation and the store's decompression then
 * run on both cores. A file given its id is first hashed (BLAKE3, the vendored C code in
 * blake3/) and written only if the hash is the id: the verification the store owes every
 * read, done here so that it leaves the caller's thread too.
 *
 * `empty_dir(path)` unlinks every entry of a flat directory that is not a directory, then
 * removes the directory, all without the GIL, so that a thread can free what a restore
 * replaced while the caller goes on. It never descends into (or removes) a subdirectory.
 *
 * This file knows nothing of plans, staging layouts or stores: checkpoints/restore/apply.py calls
 * both, checkpoints/snapshot/statcache.py `exchange` (to swap a saved cache in), and each has a
 * pure-Python fallback (plain rename; unlinking on the caller's thread) when this extension
 * is not built or the system lacks the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "blake3.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static PyObject *exchange(PyObject *self, PyObject *args) {
    const char *src, *dst;
    int dst_dir_fd;
    if (!PyArg_ParseTuple(args, "yiy", &src, &dst_dir_fd, &dst)) return NULL;
    int rc, err = 0;
    Py_BEGIN_ALLOW_THREADS
#if defined(__linux__) && defined(SYS_renameat2)
    rc = (int)syscall(SYS_renameat2, AT_FDCWD, src, dst_dir_fd, dst, RENAME_EXCHANGE);
    if (rc != 0) err = errno;
#else
    rc = -1;
    err = ENOSYS;
#endif
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        errno = err;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, dst);
    }
    Py_RETURN_NONE;
}

static PyObject *empty_dir(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "y", &path)) return NULL;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    if (dir == NULL) {
        err = errno;
        if (fd >= 0) close(fd);
    } else {
        struct dirent *entry;
        for (;;) {
            errno = 0;
            entry = readdir(dir);
            if (entry == NULL) {
                if (errno && !err) err = errno;
                break;
            }
            const char *name = entry->d_name;
            if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')))
                continue;
            /* unlinkat without AT_REMOVEDIR fails on a directory (EISDIR): it stays. */
            if (unlinkat(fd, name, 0) != 0 && errno != ENOENT && !err) err = errno;
        }
        closedir(dir);
        if (!err && rmdir(path) != 0 && errno != ENOENT) err = errno;
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

/* One file of a batch: its name in the directory, its content (`length` bytes at `start` in
 * `data`: a block's member is written from the block without a copy), the mode it is created
 * with, whether that mode is then set exactly (the umask may have taken bits away), and the
 * id its content must hash to (when `check`). */
typedef struct {
    const char *name;
    Py_buffer data;
    Py_ssize_t start;
    Py_ssize_t length;
    mode_t mode;
    int exact;
    int check;
    uint8_t oid[BLAKE3_OUT_LEN];
} NewFile;

/* What write_one returns for a content that does not hash to its id (errno values are > 0). */
#define NOT_ITS_ID (-1)

static int write_one(int dir_fd, const NewFile *f, const struct timespec times[2]) {
    if (f->check) {
        blake3_hasher hasher;
        uint8_t digest[BLAKE3_OUT_LEN];
        blake3_hasher_init(&hasher);
        blake3_hasher_update(&hasher, (const char *)f->data.buf + f->start, (size_t)f->length);
        blake3_hasher_finalize(&hasher, digest, BLAKE3_OUT_LEN);
        if (memcmp(digest, f->oid, BLAKE3_OUT_LEN) != 0) return NOT_ITS_ID;
    }
    int fd = openat(dir_fd, f->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                    f->mode);
    if (fd < 0) return errno;
    const char *at = (const char *)f->data.buf + f->start;
    Py_ssize_t left = f->length;
    int err = 0;
    while (left > 0 && !err) {
        ssize_t n = write(fd, at, (size_t)left);
        if (n < 0) {
            if (errno != EINTR) err = errno;
        } else {
            at += n;
            left -= n;
        }
    }
    if (!err && f->exact && fchmod(fd, f->mode) != 0) err = errno;
    if (!err && futimens(fd, times) != 0) err = errno;
    if (close(fd) != 0 && !err && errno != EINTR) err = errno;
    return err;
}

static PyObject *write_files(PyObject *self, PyObject *args) {
    int dir_fd;
    PyObject *items;
    long long stamp;
    if (!PyArg_ParseTuple(args, "iO!L", &dir_fd, &PyList_Type, &items, &stamp)) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(items), ready = 0;
    NewFile *files = PyMem_Calloc(count ? (size_t)count : 1, sizeof(NewFile));
    if (files == NULL) return PyErr_NoMemory();
    PyObject *result = NULL;
    while (ready < count) {
        NewFile *f = &files[ready];
        PyObject *item = PyList_GET_ITEM(items, ready);
        unsigned int mode;
        const char *oid = NULL;
        Py_ssize_t oid_len = 0;
        if (!PyArg_ParseTuple(item, "yy*nnIpz#", &f->name, &f->data, &f->start, &f->length,
                              &mode, &f->exact, &oid, &oid_len)) {
            goto done;
        }
        ready++;  /* its buffer is held: released below */
        if (f->start < 0 || f->length < 0 || f->start > f->data.len - f->length) {
            PyErr_SetString(PyExc_ValueError, "a content lies outside its buffer");
            goto done;
        }
        f->mode = (mode_t)mode;
        if (oid != NULL) {
            if (oid_len != BLAKE3_OUT_LEN) {
                PyErr_SetString(PyExc_ValueError, "an id is 32 bytes");
                goto done;
            }
            memcpy(f->oid, oid, BLAKE3_OUT_LEN);
            f->check = 1;
        }
    }
    Py_ssize_t failed = -1;
    int err = 0;
    struct timespec times[2];
    times[0].tv_sec = (time_t)(stamp / 1000000000);
    times[0].tv_nsec = (long)(stamp % 1000000000);
    times[1] = times[0];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        err = write_one(dir_fd, &files[i], times);
        if (err) {
            failed = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (failed < 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = Py_BuildValue("(ni)", failed, err);
    }
done:
    for (Py_ssize_t i = 0; i < ready; i++) PyBuffer_Release(&files[i].data);
    PyMem_Free(files);
    return result;
}

static PyMethodDef methods[] = {
    {"exchange", exchange, METH_VARARGS,
     "exchange(src: bytes, dst_dir_fd: int, dst: bytes) -> None\n"
     "Swap `src` (absolute, or relative to the working directory) and `dst` (relative to\n"
     "`dst_dir_fd`) atomically; both must exist. OSError as renameat2 reports it (EINVAL or\n"
     "ENOSYS where the file system or the system cannot exchange)."},
    {"write_files", write_files, METH_VARARGS,
     "write_files(dir_fd: int,\n"
     "            items: list[tuple[bytes, Buffer, int, int, int, bool, bytes | None]],\n"
     "            stamp_ns: int) -> tuple[int, int] | None\n"
     "For each (name, buffer, start, length, mode, exact, oid) in order, without the GIL, the\n"
     "content being `length` bytes at `start` in `buffer`: if `oid` is given, hash the\n"
     "content (BLAKE3) and stop unless it is `oid`; create `name` in `dir_fd` (O_EXCL, no\n"
     "symlink followed) with `mode` (less the umask), write the content, set `mode` exactly\n"
     "if `exact`, and date it `stamp_ns` (access and modification). None when every file was\n"
     "written, else (index, errno) of the first that failed, errno -1 for a content that is\n"
     "not its id (its file not created): the files before it are complete, that one may\n"
     "exist partly written, the rest were not begun."},
    {"empty_dir", empty_dir, METH_VARARGS,
     "empty_dir(path: bytes) -> int\n"
     "Unlink every entry of `path` that is not a directory, then remove `path`, without the\n"
     "GIL; 0, or the first errno that kept something (a subdirectory: EISDIR) from going."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fsops", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fsops(void) { return PyModule_Create(&module); }
