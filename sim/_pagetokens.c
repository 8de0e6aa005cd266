/* The token copy's page loops in C: sim/kv/page_tokens.py's writes and comparisons, page by
   page, over the same arrays and in the same order as its numpy path (so the same rows are
   taken and given back):

   low     int16 [num_pages, page_size]  each id's low 16 bits
   mask    int32 or int64 [num_pages]    the mask form's 17th bits, or -1 - row
   rows    int16 [num_rows, page_size]   the row form's high halves
   free    int32 [num_rows]              a stack of the free rows, free[num_free[0] - 1] on top
   num_free int64 [1]

   Nothing here allocates a row: a write that finds no free row stops and says where, and the
   caller grows the arrays and goes on from there.

   Built by scripts/build_native.py, used only while sim/native.json records this source. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_BUFFERS 8

typedef struct {
    Py_buffer views[MAX_BUFFERS];
    int count;
} Buffers;

static void release_all(Buffers *b) {
    for (int i = 0; i < b->count; i++) PyBuffer_Release(&b->views[i]);
    b->count = 0;
}

/* A C-contiguous buffer of `itemsize`-byte integers (0: 4 or 8; 1: bool), as a flat array. */
static Py_buffer *open_flat(Buffers *b, PyObject *array, int writable, Py_ssize_t itemsize,
                            const char *what) {
    Py_buffer *view = &b->views[b->count];
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(array, view, flags) < 0) return NULL;
    b->count++;
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    const char *kinds = itemsize == 1 ? "?" : "hilq";
    int ok = itemsize ? view->itemsize == itemsize : view->itemsize == 4 || view->itemsize == 8;
    if (!ok || strlen(format) != 1 || strchr(kinds, *format) == NULL) {
        PyErr_Format(PyExc_TypeError, "%s has the wrong item size", what);
        return NULL;
    }
    return view;
}

typedef struct {
    int16_t *low, *rows;
    void *mask;
    int wide_mask; /* int64 masks (pages of 32-63 ids) */
    const int64_t *pages;
    int64_t one_page; /* pages given as one Python int */
    const int32_t *ids;
    Py_ssize_t page_size, num_pages, num_rows, count;
} Table;

static inline int64_t mask_at(const Table *t, Py_ssize_t page) {
    return t->wide_mask ? ((int64_t *)t->mask)[page] : ((int32_t *)t->mask)[page];
}

static inline void set_mask(Table *t, Py_ssize_t page, int64_t value) {
    if (t->wide_mask)
        ((int64_t *)t->mask)[page] = value;
    else
        ((int32_t *)t->mask)[page] = (int32_t)value;
}

/* The mask form of ids (bit j = bit 16 of id j), or -1 if an id lies outside [0, 2**17) or
   there are more than 63 ids. */
static inline int64_t mask_form(const int32_t *ids, Py_ssize_t page_size) {
    if (page_size > 63) return -1;
    uint64_t mask = 0;
    for (Py_ssize_t j = 0; j < page_size; j++) {
        uint32_t high = (uint32_t)ids[j] >> 16;
        if (high > 1) return -1;
        mask |= (uint64_t)high << j;
    }
    return (int64_t)mask;
}

static inline int16_t low_of(int32_t id) { return (int16_t)(uint16_t)(uint32_t)id; }
static inline int16_t high_of(int32_t id) { return (int16_t)(uint16_t)((uint32_t)id >> 16); }

/* args[0..]: low, mask, rows, then `pages` (an int64 array, or one page as a Python int) and
   `ids` (int32) at the given positions, page_size at `size_at`. */
static int open_table(Table *t, Buffers *b, PyObject *const *args, Py_ssize_t pages_at,
                      Py_ssize_t size_at) {
    memset(t, 0, sizeof(*t));
    t->page_size = PyLong_AsSsize_t(args[size_at]);
    if (t->page_size < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "page_size must be >= 1");
        return -1;
    }
    Py_buffer *low = open_flat(b, args[0], 1, 2, "low");
    Py_buffer *mask = low ? open_flat(b, args[1], 1, 0, "mask") : NULL;
    Py_buffer *rows = mask ? open_flat(b, args[2], 1, 2, "rows") : NULL;
    if (rows == NULL) return -1;
    Py_buffer *pages = NULL;
    if (PyLong_Check(args[pages_at])) {
        t->one_page = PyLong_AsLongLong(args[pages_at]);
        if (t->one_page == -1 && PyErr_Occurred()) return -1;
        t->pages = &t->one_page;
        t->count = 1;
    } else {
        pages = open_flat(b, args[pages_at], 0, 8, "pages");
        if (pages == NULL) return -1;
        t->pages = pages->buf;
        t->count = pages->len / 8;
    }
    Py_buffer *ids = open_flat(b, args[pages_at + 1], 0, 4, "ids");
    if (ids == NULL) return -1;
    t->low = low->buf;
    t->mask = mask->buf;
    t->wide_mask = mask->itemsize == 8;
    t->rows = rows->buf;
    t->ids = ids->buf;
    t->num_pages = mask->len / mask->itemsize;
    t->num_rows = rows->len / 2 / t->page_size;
    if (low->len / 2 != t->num_pages * t->page_size || ids->len / 4 != t->count * t->page_size ||
        rows->len / 2 != t->num_rows * t->page_size) {
        PyErr_SetString(PyExc_ValueError, "low, mask, rows, pages and ids do not agree in size");
        return -1;
    }
    for (Py_ssize_t i = 0; i < t->count; i++) {
        if (t->pages[i] < 0 || t->pages[i] >= t->num_pages) {
            PyErr_SetString(PyExc_IndexError, "page id out of range");
            return -1;
        }
    }
    return 0;
}

/* write(low, mask, rows, free, num_free, pages, ids, page_size) -> int

   Page pages[i] now holds ids[i], for i from 0 on; returns the first i that found no free
   row (nothing of it written), or -1 once every page is written. */
static PyObject *write_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "write takes 8 arguments");
        return NULL;
    }
    Buffers b = {.count = 0};
    Table t;
    if (open_table(&t, &b, args, 5, 7) < 0) goto fail;
    Py_buffer *free_view = open_flat(&b, args[3], 1, 4, "free");
    Py_buffer *count_view = free_view ? open_flat(&b, args[4], 1, 8, "num_free") : NULL;
    if (count_view == NULL) goto fail;
    int32_t *free = free_view->buf;
    int64_t *num_free = count_view->buf;
    if (free_view->len / 4 != t.num_rows || count_view->len != 8 || *num_free < 0 ||
        *num_free > t.num_rows) {
        PyErr_SetString(PyExc_ValueError, "free and num_free do not fit rows");
        goto fail;
    }
    Py_ssize_t stopped = -1;
    const Py_ssize_t p = t.page_size;
    for (Py_ssize_t i = 0; i < t.count; i++) {
        Py_ssize_t page = (Py_ssize_t)t.pages[i];
        const int32_t *ids = t.ids + i * p;
        int64_t mask = mask_form(ids, p);
        int64_t old = mask_at(&t, page);
        if (mask < 0 && old >= 0 && *num_free == 0) { /* a row is needed and none is free */
            stopped = i;
            break;
        }
        int16_t *low = t.low + page * p;
        for (Py_ssize_t j = 0; j < p; j++) low[j] = low_of(ids[j]);
        if (old < 0) free[(*num_free)++] = (int32_t)(-1 - old); /* its row is given back */
        if (mask < 0) {
            int32_t row = free[--(*num_free)];
            int16_t *high = t.rows + (Py_ssize_t)row * p;
            for (Py_ssize_t j = 0; j < p; j++) high[j] = high_of(ids[j]);
            mask = -1 - (int64_t)row;
        }
        set_mask(&t, page, mask);
    }
    release_all(&b);
    return PyLong_FromSsize_t(stopped);
fail:
    release_all(&b);
    return NULL;
}

/* same(low, mask, rows, pages, ids, page_size, out) -> None

   out[i] = page pages[i] holds exactly ids[i] (out: bool, one per page). A page in the mask
   form holds only ids of that form, one in the row form only ids that need a row. */
static PyObject *same_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "same takes 7 arguments");
        return NULL;
    }
    Buffers b = {.count = 0};
    Table t;
    if (open_table(&t, &b, args, 3, 5) < 0) goto fail;
    Py_buffer *out_view = open_flat(&b, args[6], 1, 1, "out");
    if (out_view == NULL) goto fail;
    if (out_view->len != t.count) {
        PyErr_SetString(PyExc_ValueError, "out needs one entry per page");
        goto fail;
    }
    char *out = out_view->buf;
    const Py_ssize_t p = t.page_size;
    for (Py_ssize_t i = 0; i < t.count; i++) {
        Py_ssize_t page = (Py_ssize_t)t.pages[i];
        const int32_t *ids = t.ids + i * p;
        const int16_t *low = t.low + page * p;
        int equal = 1;
        for (Py_ssize_t j = 0; j < p && equal; j++) equal = low[j] == low_of(ids[j]);
        int64_t mask = mask_at(&t, page);
        if (equal && mask >= 0) {
            /* (a page never written holds zeros in the mask form, whatever its size) */
            if (p > 63)
                for (Py_ssize_t j = 0; j < p && equal; j++) equal = high_of(ids[j]) == 0;
            else
                equal = mask_form(ids, p) == mask;
        } else if (equal) {
            const int16_t *high = t.rows + (Py_ssize_t)(-1 - mask) * p;
            if (-1 - mask >= t.num_rows) {
                PyErr_SetString(PyExc_IndexError, "a page's row is out of range");
                goto fail;
            }
            for (Py_ssize_t j = 0; j < p && equal; j++) equal = high[j] == high_of(ids[j]);
        }
        out[i] = (char)equal;
    }
    release_all(&b);
    Py_RETURN_NONE;
fail:
    release_all(&b);
    return NULL;
}

static PyMethodDef methods[] = {
    {"write", (PyCFunction)(void (*)(void))write_pages, METH_FASTCALL, "write pages' ids"},
    {"same", (PyCFunction)(void (*)(void))same_pages, METH_FASTCALL, "compare pages' ids"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_pagetokens", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__pagetokens(void) { return PyModule_Create(&module); }
