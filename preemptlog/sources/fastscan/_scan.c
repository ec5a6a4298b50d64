/* preemptlog.sources.fastscan._scan: the compiled log pass as a CPython extension (issue 36).
 *
 * The pass itself is scan_core.c (its header comment says what is data given by Python and what
 * is code here). This file binds it: `Config(...)` takes the markers, regex programs and field
 * map from fastscan/__init__.py; `scan(config, buffer, start, window, line_base, threads)` scans
 * the lines that start in [start, start + window) of a buffer (a window of the log, cut after a line feed) on `threads`
 * threads without the GIL, each thread a byte range cut on a line boundary, and returns one
 * `Batch` per range (a struct array of the record columns, handed to polars through the Arrow
 * C data interface: `Batch.__arrow_c_array__`, zero copy), the slow lines by position, the
 * offset where the next window starts and the number of lines read; with `split`, a fifth item:
 * the Batches of the request rows (markers marked hot), which then leave the first list.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scan_core.h"

/* ------------------------------------------------------------------ Arrow C data interface */

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#define ARROW_FLAG_NULLABLE 2

static const char *COL_NAMES[FS_NCOL] = {"n",     "mk",    "level", "proc",   "compose", "mo",         "dd",
                                         "hh",    "mi",    "ss",    "hfrac",  "fdate",   "ftime",      "ffrac",
                                         "fzone", "fb",    "text",  "req_id", "max_tokens", "prompt_tokens"};
/* the fixed-width columns' formats (the string columns are string views, "vu": fs_out_views) */
static const char *COL_FORMATS[FS_NCOL] = {"I", "C", "vu", "vu", "vu", "c",  "c",  "c",  "c", "c",
                                           "vu", "vu", "vu", "vu", "vu", "vu", "vu", "vu", "l", "l"};

static void release_child_schema(struct ArrowSchema *s) { s->release = NULL; }

static void release_struct_schema(struct ArrowSchema *s) {
    if (!s->release) return;
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *c = s->children[i];
        if (c->release) c->release(c);
        free(c);
    }
    free(s->children);
    s->release = NULL;
}

typedef struct {
    const void *bufs[4]; /* validity, values (or views), data, data size (views) */
    void *own[3];
    int64_t size;
} child_priv;

static void release_child_array(struct ArrowArray *a) {
    if (!a->release) return;
    child_priv *p = (child_priv *)a->private_data;
    for (int i = 0; i < 3; i++) free(p->own[i]);
    free(p);
    a->release = NULL;
}

static void release_struct_array(struct ArrowArray *a) {
    if (!a->release) return;
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c->release) c->release(c);
        free(c);
    }
    free(a->children);
    free((void *)a->buffers);
    a->release = NULL;
}

static void capsule_schema_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (s) {
        if (s->release) s->release(s);
        free(s);
    }
}

static void capsule_array_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (a) {
        if (a->release) a->release(a);
        free(a);
    }
}

/* ------------------------------------------------------------------ Batch */

typedef struct {
    PyObject_HEAD fs_out out;
    int exported;
} BatchObject;

static void Batch_dealloc(BatchObject *self) {
    fs_out_free(&self->out);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Batch_len(BatchObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLongLong(self->out.rows);
}

static struct ArrowSchema *make_schema(void) {
    struct ArrowSchema *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->children = calloc(FS_NCOL, sizeof(struct ArrowSchema *));
    if (!s->children) {
        free(s);
        return NULL;
    }
    for (int i = 0; i < FS_NCOL; i++) {
        struct ArrowSchema *c = calloc(1, sizeof(*c));
        if (!c) {
            s->n_children = i;
            s->release = release_struct_schema;
            release_struct_schema(s);
            free(s);
            return NULL;
        }
        c->format = COL_FORMATS[i];
        c->name = COL_NAMES[i];
        c->flags = ARROW_FLAG_NULLABLE;
        c->release = release_child_schema;
        s->children[i] = c;
    }
    s->format = "+s";
    s->name = "";
    s->n_children = FS_NCOL;
    s->release = release_struct_schema;
    return s;
}

static struct ArrowArray *make_array(fs_out *o) {
    struct ArrowArray *a = calloc(1, sizeof(*a));
    if (!a) return NULL;
    a->children = calloc(FS_NCOL, sizeof(struct ArrowArray *));
    a->buffers = calloc(1, sizeof(void *));
    if (!a->children || !a->buffers) {
        free(a->children);
        free((void *)a->buffers);
        free(a);
        return NULL;
    }
    a->length = o->rows;
    a->n_buffers = 1;
    a->n_children = FS_NCOL;
    a->release = release_struct_array;
    for (int i = 0; i < FS_NCOL; i++) {
        struct ArrowArray *c = calloc(1, sizeof(*c));
        child_priv *p = calloc(1, sizeof(*p));
        if (!c || !p) {
            free(c);
            free(p);
            a->n_children = i;
            release_struct_array(a);
            free(a);
            return NULL;
        }
        fs_col *col = &o->cols[i];
        int is_str = fs_is_string_col(i);
        c->length = o->rows;
        c->null_count = col->nulls;
        c->n_buffers = is_str ? 4 : 2; /* a view array: validity, views, one data buffer, its size */
        p->size = (int64_t)col->data.len;
        p->bufs[3] = &p->size;
        /* ownership moves to the array */
        p->own[0] = col->valid.p;
        p->own[1] = col->values.p;
        p->own[2] = col->data.p;
        p->bufs[0] = col->nulls ? col->valid.p : NULL;
        p->bufs[1] = col->values.p;
        p->bufs[2] = col->data.p ? col->data.p : (const void *)"";
        memset(col, 0, sizeof(*col));
        c->buffers = p->bufs;
        c->private_data = p;
        c->release = release_child_array;
        a->children[i] = c;
    }
    return a;
}

static PyObject *Batch_arrow_c_array(BatchObject *self, PyObject *args, PyObject *kwargs) {
    if (fs_out_views(&self->out) < 0) return PyErr_NoMemory(); /* done by the scan's threads already */
    static char *kwlist[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", kwlist, &requested)) return NULL;
    if (self->exported) {
        PyErr_SetString(PyExc_RuntimeError, "a fastscan batch is exported once");
        return NULL;
    }
    struct ArrowSchema *s = make_schema();
    if (!s) return PyErr_NoMemory();
    struct ArrowArray *a = make_array(&self->out);
    if (!a) {
        s->release(s);
        free(s);
        return PyErr_NoMemory();
    }
    self->exported = 1;
    PyObject *cs = PyCapsule_New(s, "arrow_schema", capsule_schema_free);
    if (!cs) {
        s->release(s);
        free(s);
        a->release(a);
        free(a);
        return NULL;
    }
    PyObject *ca = PyCapsule_New(a, "arrow_array", capsule_array_free);
    if (!ca) {
        Py_DECREF(cs);
        a->release(a);
        free(a);
        return NULL;
    }
    return Py_BuildValue("(NN)", cs, ca);
}

static PyMethodDef Batch_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))Batch_arrow_c_array, METH_VARARGS | METH_KEYWORDS,
     "The batch's columns as an Arrow struct array (PyCapsule interface); once."},
    {"rows", (PyCFunction)Batch_len, METH_NOARGS, "rows in the batch"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "preemptlog.sources.fastscan._scan.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Record columns of one byte range of a log (Arrow PyCapsule interface).",
    .tp_methods = Batch_methods,
};

/* ------------------------------------------------------------------ Config */

typedef struct {
    PyObject_HEAD fs_config cfg;
    int ready;
} ConfigObject;

static void Config_dealloc(ConfigObject *self) {
    if (self->ready) fs_config_free(&self->cfg);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Config_init(ConfigObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"blob", NULL};
    Py_buffer blob;
    if (self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "Config is initialised once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*", kwlist, &blob)) return -1;
    const char *why = NULL;
    int r = fs_config_load(&self->cfg, (const uint8_t *)blob.buf, (size_t)blob.len, &why);
    PyBuffer_Release(&blob);
    if (r < 0) {
        PyErr_SetString(PyExc_ValueError, why ? why : "bad fastscan configuration");
        return -1;
    }
    self->ready = 1;
    return 0;
}

static PyTypeObject ConfigType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "preemptlog.sources.fastscan._scan.Config",
    .tp_basicsize = sizeof(ConfigObject),
    .tp_dealloc = (destructor)Config_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Config(blob): markers, regex programs and field map of the compiled pass (fastscan/__init__.py).",
    .tp_init = (initproc)Config_init,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ scan */

typedef struct {
    const fs_config *cfg;
    const uint8_t *buf;
    size_t size, start, end;
    fs_out *out;
} job;

static void *run_job(void *arg) {
    job *j = (job *)arg;
    fs_scan_range(j->cfg, j->buf, j->size, j->start, j->end, j->out);
    /* the string columns as polars holds them, on this thread (oom is seen by the caller) */
    if (!j->out->oom) fs_out_views(j->out);
    if (!j->out->oom && j->out->hot_rows && fs_out_views(j->out->hot_rows) < 0) j->out->oom = 1;
    return NULL;
}

#define FS_MAX_THREADS 16

/* Move a range's rows into a Batch appended to `list` (none when it has no rows); `o` is left
 * empty either way. 0, or -1 with an exception set. */
static int add_batch(PyObject *list, fs_out *o) {
    if (o->rows == 0) {
        fs_out_free(o);
        return 0;
    }
    BatchObject *b = PyObject_New(BatchObject, &BatchType);
    if (!b) return -1;
    b->out = *o;
    b->exported = 0;
    b->out.hot_rows = NULL;
    free(b->out.slow);
    b->out.slow = NULL;
    b->out.nslow = b->out.capslow = 0;
    free(b->out.stack);
    b->out.stack = NULL;
    b->out.stack_cap = 0;
    free(b->out.cache);
    b->out.cache = NULL;
    memset(o, 0, sizeof(fs_out));
    int r = PyList_Append(list, (PyObject *)b);
    Py_DECREF(b);
    return r;
}

static PyObject *py_scan(PyObject *mod, PyObject *args) {
    ConfigObject *cfgo;
    Py_buffer view;
    Py_ssize_t start, window, base;
    int threads, file_start = 1, split = 0;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!y*nnni|pp", &ConfigType, &cfgo, &view, &start, &window, &base, &threads,
                          &file_start, &split))
        return NULL;
    if (!cfgo->ready || start < 0 || start > view.len || window < 1 || base < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad scan arguments");
        return NULL;
    }
    if (threads < 1) threads = 1;
    if (threads > FS_MAX_THREADS) threads = FS_MAX_THREADS;
    const uint8_t *buf = (const uint8_t *)view.buf;
    size_t size = (size_t)view.len;
    size_t s0 = (size_t)start;
    size_t we = s0 + (size_t)window > size || s0 + (size_t)window < s0 ? size : s0 + (size_t)window;
    fs_out outs[FS_MAX_THREADS], hots[FS_MAX_THREADS];
    job jobs[FS_MAX_THREADS];
    pthread_t tids[FS_MAX_THREADS];
    int started[FS_MAX_THREADS];
    size_t cuts[FS_MAX_THREADS + 1];
    int64_t lines = base;
    Py_BEGIN_ALLOW_THREADS;
    we = fs_next_line_start(buf, size, we);
    if ((we - s0) < ((size_t)1 << 20)) threads = 1; /* small ranges: one thread */
    cuts[0] = s0;
    for (int k = 1; k < threads; k++) {
        size_t at = s0 + (we - s0) / (size_t)threads * (size_t)k;
        at = fs_next_line_start(buf, size, at);
        cuts[k] = at < cuts[k - 1] ? cuts[k - 1] : at > we ? we : at;
    }
    cuts[threads] = we;
    for (int k = 0; k < threads; k++) {
        fs_out_init(&outs[k]);
        fs_out_init(&hots[k]);
        outs[k].mid_file = !file_start;
        outs[k].hot_rows = split ? &hots[k] : NULL;
        jobs[k].cfg = &cfgo->cfg;
        jobs[k].buf = buf;
        jobs[k].size = size;
        jobs[k].start = cuts[k];
        jobs[k].end = cuts[k + 1];
        jobs[k].out = &outs[k];
        started[k] = k > 0 && pthread_create(&tids[k], NULL, run_job, &jobs[k]) == 0;
    }
    for (int k = 0; k < threads; k++)
        if (!started[k]) run_job(&jobs[k]);
    for (int k = 1; k < threads; k++)
        if (started[k]) pthread_join(tids[k], NULL);
    /* line numbers: 1-based in the file */
    for (int k = 0; k < threads; k++) {
        fs_col *nc = &outs[k].cols[C_N];
        uint32_t *n = (uint32_t *)nc->values.p;
        for (int64_t i = 0; i < outs[k].rows; i++) n[i] = (uint32_t)(n[i] + lines + 1);
        uint32_t *hn = (uint32_t *)hots[k].cols[C_N].values.p;
        for (int64_t i = 0; i < hots[k].rows; i++) hn[i] = (uint32_t)(hn[i] + lines + 1);
        for (size_t i = 0; i < outs[k].nslow; i++) outs[k].slow[i].n += lines + 1;
        lines += outs[k].lines;
    }
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&view);
    int oom = 0;
    for (int k = 0; k < threads; k++) oom |= outs[k].oom;
    PyObject *batches = PyList_New(0), *slow = PyList_New(0), *hot_batches = PyList_New(0);
    if (oom || !batches || !slow || !hot_batches) {
        for (int k = 0; k < threads; k++) {
            fs_out_free(&outs[k]);
            fs_out_free(&hots[k]);
        }
        Py_XDECREF(batches);
        Py_XDECREF(slow);
        Py_XDECREF(hot_batches);
        return oom ? PyErr_NoMemory() : NULL;
    }
    for (int k = 0; k < threads; k++) {
        outs[k].hot_rows = NULL;
        if (add_batch(hot_batches, &hots[k]) < 0) goto fail;
    }
    for (int k = 0; k < threads; k++) {
        for (size_t i = 0; i < outs[k].nslow; i++) {
            fs_slow *sl = &outs[k].slow[i];
            PyObject *t = Py_BuildValue("(LKK)", (long long)sl->n, (unsigned long long)sl->off,
                                        (unsigned long long)sl->len);
            if (!t || PyList_Append(slow, t) < 0) {
                Py_XDECREF(t);
                goto fail;
            }
            Py_DECREF(t);
        }
        if (add_batch(batches, &outs[k]) < 0) goto fail;
    }
    if (split) return Py_BuildValue("(NNnLN)", batches, slow, (Py_ssize_t)we, (long long)(lines - base), hot_batches);
    Py_DECREF(hot_batches);
    return Py_BuildValue("(NNnL)", batches, slow, (Py_ssize_t)we, (long long)(lines - base));
fail:
    for (int k = 0; k < threads; k++) {
        fs_out_free(&outs[k]);
        fs_out_free(&hots[k]);
    }
    Py_DECREF(batches);
    Py_DECREF(slow);
    Py_DECREF(hot_batches);
    return NULL;
}

/* The matcher alone, for the tests: (1, groups) / (0, None) / (-1, None). */
static PyObject *py_search(PyObject *mod, PyObject *args) {
    ConfigObject *cfgo;
    int which;
    Py_buffer view;
    (void)mod;
    if (!PyArg_ParseTuple(args, "O!iy*", &ConfigType, &cfgo, &which, &view)) return NULL;
    if (!cfgo->ready || which < 0 || which >= FS_NPROG) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad program");
        return NULL;
    }
    fs_out scratch;
    fs_out_init(&scratch);
    int32_t slots[64];
    const fs_prog *p = &cfgo->cfg.prog[which];
    int r = fs_search(p, (const uint8_t *)view.buf, (size_t)view.len, slots, &scratch);
    fs_out_free(&scratch);
    PyBuffer_Release(&view);
    if (r != 1) return Py_BuildValue("(iO)", r, Py_None);
    PyObject *t = PyTuple_New(p->nslots);
    if (!t) return NULL;
    for (int i = 0; i < p->nslots; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLong(slots[i]));
    return Py_BuildValue("(iN)", r, t);
}

static PyMethodDef module_methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(config, buffer, start, window, line_base, threads, file_start=True, split=False) -> (batches, slow, "
     "next_start, lines[, request_batches]); file_start: the buffer's byte 0 is the file's first (a UTF-8 BOM there "
     "is dropped); split: the request rows in a list of their own"},
    {"search", py_search, METH_VARARGS, "search(config, program, bytes) -> (status, slots)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_scan", "The compiled log pass (see fastscan/__init__.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&BatchType) < 0 || PyType_Ready(&ConfigType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&BatchType);
    Py_INCREF(&ConfigType);
    if (PyModule_AddObject(m, "Batch", (PyObject *)&BatchType) < 0 ||
        PyModule_AddObject(m, "Config", (PyObject *)&ConfigType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
