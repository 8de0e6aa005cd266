/* The prefix index's level 1 in C: page key -> page, the loops of sim/kv/page_slots.py.

   The table is one array the Python side owns, pages (a page id, or EMPTY), one slot each:
   uint16 (EMPTY 0xFFFF) for a pool of fewer than 65,535 pages, else int32 (EMPTY -1); linear
   probing from key & mask; a slot's key is its page's entry in the index's own
   page keys (uint64, one per page of the pool), which `claim` writes as it places a page. A
   slot is 2 or 4 bytes where a copy of the key beside it made 12 (0.65 MB a node less at 65,536
   slots). So a page holds at most one slot: claiming a key for a page that holds another is
   refused (the index never does: it claims only pages it has not indexed). Each function walks
   the keys' probe paths in the order given, exactly as a dict's get, setdefault and pop would
   answer them one after another (tests/sim/test_page_slots.py compares the two). Every key and
   page is converted before any slot changes, so a batch with a bad one fails whole.

   A removal closes the gap it leaves (backward-shift deletion: a later key of the same cluster
   whose home is not between the gap and it moves into the gap, and so on to the cluster's end),
   so no probe path ever crosses an empty slot before its key and there are no tombstones: the
   table holds live keys only and never needs rebuilding to shed removed ones.

   Built by scripts/build_native.py, used only while sim/native.json records this source. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define EMPTY (-1)
#define NARROW_EMPTY 0xFFFF /* EMPTY in a uint16 table */

typedef struct {
    Py_buffer keys, pages;
    uint64_t *key_of; /* the index's page keys: key_of[page] is the key of a slot holding page */
    Py_ssize_t num_pages;
    void *slots;
    int narrow; /* uint16 slots */
    uint64_t mask;
} Table;

/* The page in a slot, or EMPTY. */
static inline int32_t slot_page(const Table *t, uint64_t slot) {
    if (!t->narrow) return ((const int32_t *)t->slots)[slot];
    uint16_t page = ((const uint16_t *)t->slots)[slot];
    return page == NARROW_EMPTY ? EMPTY : (int32_t)page;
}

static inline void set_slot(Table *t, uint64_t slot, int32_t page) {
    if (t->narrow)
        ((uint16_t *)t->slots)[slot] = page == EMPTY ? NARROW_EMPTY : (uint16_t)page;
    else
        ((int32_t *)t->slots)[slot] = page;
}

#define SLOT_KEY(t, slot) ((t)->key_of[slot_page(t, slot)])

/* One array's buffer: writable, contiguous, one-dimensional, of this item size (0: 2 or 4) and
   format kind. */
static int open_array(PyObject *array, Py_buffer *view, Py_ssize_t itemsize, const char *kinds) {
    int flags = PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(array, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    int size_ok = itemsize ? view->itemsize == itemsize
                           : (view->itemsize == 4 && strchr("iI", *format) != NULL) ||
                                 (view->itemsize == 2 && *format == 'H');
    if (view->ndim != 1 || !size_ok || strlen(format) != 1 || strchr(kinds, *format) == NULL) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError,
                        "page keys must be a uint64 and slots an int32 or uint16 array");
        return -1;
    }
    return 0;
}

/* The two arrays: the slots' size checked against the mask (a power of two minus 1); the page
   keys, one per page (a page id in a slot is below their count: `claim` checks it). */
static int table_open(Table *t, PyObject *keys, PyObject *pages, PyObject *mask_arg) {
    unsigned long long mask = PyLong_AsUnsignedLongLong(mask_arg);
    if (mask == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (mask >= (unsigned long long)(PY_SSIZE_T_MAX / 8) || (mask & (mask + 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "mask must be a power of two minus 1");
        return -1;
    }
    if (open_array(keys, &t->keys, 8, "QLK") < 0) return -1;
    if (open_array(pages, &t->pages, 0, "iIH") < 0) {
        PyBuffer_Release(&t->keys);
        return -1;
    }
    Py_ssize_t slots = (Py_ssize_t)mask + 1;
    if (t->pages.shape[0] != slots) {
        PyBuffer_Release(&t->keys);
        PyBuffer_Release(&t->pages);
        PyErr_SetString(PyExc_ValueError, "the slots need mask + 1 of them");
        return -1;
    }
    t->key_of = (uint64_t *)t->keys.buf;
    t->num_pages = t->keys.shape[0];
    t->slots = t->pages.buf;
    t->narrow = t->pages.itemsize == 2;
    t->mask = (uint64_t)mask;
    if (t->narrow && t->num_pages >= NARROW_EMPTY) {
        PyBuffer_Release(&t->keys);
        PyBuffer_Release(&t->pages);
        PyErr_SetString(PyExc_ValueError, "uint16 slots hold pools of fewer than 65,535 pages");
        return -1;
    }
    return 0;
}

static void table_close(Table *t) {
    PyBuffer_Release(&t->keys);
    PyBuffer_Release(&t->pages);
}

/* From key's home: its slot or -1, and the EMPTY slot that ends its path (where it would go;
   -1 if none: a table without an EMPTY slot, which the caller's fill bound rules out, is
   walked once round and never loops). */
static Py_ssize_t probe(const Table *t, uint64_t key, Py_ssize_t *vacant) {
    uint64_t slot = key & t->mask;
    *vacant = -1;
    for (uint64_t steps = 0; steps <= t->mask; steps++) {
        if (slot_page(t, slot) == EMPTY) {
            *vacant = (Py_ssize_t)slot;
            return -1;
        }
        if (SLOT_KEY(t, slot) == key) return (Py_ssize_t)slot;
        slot = (slot + 1) & t->mask;
    }
    return -1;
}

/* The key at `slot` removed and its cluster closed up behind it: each later key of the cluster
   that may sit in the gap (its home is not in (gap, its slot], cyclically) moves into it, and
   its own slot becomes the gap; the gap left at the cluster's end is emptied. */
static void remove_at(Table *t, uint64_t gap) {
    uint64_t mask = t->mask, next = gap;
    for (uint64_t steps = 0; steps < mask; steps++) {
        next = (next + 1) & mask;
        if (slot_page(t, next) == EMPTY) break;
        uint64_t home = SLOT_KEY(t, next) & mask;
        if (((next - home) & mask) < ((next - gap) & mask)) continue; /* home in (gap, next] */
        set_slot(t, gap, slot_page(t, next));
        gap = next;
    }
    set_slot(t, gap, EMPTY);
}

/* key as a uint64: 1; 0 if it is an int outside 0..2**64-1 (no table holds it); -1 with an
   exception if it is not an int. */
static int as_key(PyObject *item, uint64_t *key) {
    PyObject *index = PyNumber_Index(item);
    if (index == NULL) return -1;
    *key = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (*key == (uint64_t)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* A sequence of keys converted: keys[i], with held[i] = 0 for an int no table can hold. */
typedef struct {
    uint64_t *keys;
    char *held;
    Py_ssize_t n;
} Keys;

static void keys_close(Keys *k) {
    PyMem_Free(k->keys);
    PyMem_Free(k->held);
}

static int keys_open(Keys *k, PyObject *sequence, int refuse_unholdable) {
    PyObject *items = PySequence_Tuple(sequence); /* owned: no caller code changes it meanwhile */
    if (items == NULL) return -1;
    k->n = PyTuple_GET_SIZE(items);
    k->keys = PyMem_Malloc(sizeof(uint64_t) * (size_t)(k->n ? k->n : 1));
    k->held = PyMem_Malloc((size_t)(k->n ? k->n : 1));
    if (k->keys == NULL || k->held == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < k->n; i++) {
        int ok = as_key(PyTuple_GET_ITEM(items, i), &k->keys[i]);
        if (ok < 0) goto fail;
        if (ok == 0 && refuse_unholdable) {
            PyErr_SetString(PyExc_OverflowError, "a page key must be in 0..2**64-1");
            goto fail;
        }
        k->held[i] = (char)ok;
    }
    Py_DECREF(items);
    return 0;
fail:
    Py_DECREF(items);
    keys_close(k);
    return -1;
}

/* page ids as int32 in 0..num_pages-1, one per key. */
static int32_t *pages_of(PyObject *sequence, Py_ssize_t n, Py_ssize_t num_pages) {
    PyObject *items = PySequence_Tuple(sequence);
    if (items == NULL) return NULL;
    int32_t *out = NULL;
    if (PyTuple_GET_SIZE(items) != n) {
        PyErr_SetString(PyExc_ValueError, "one page per key");
        goto done;
    }
    out = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long page = PyLong_AsLong(PyTuple_GET_ITEM(items, i));
        if (page == -1 && PyErr_Occurred()) goto bad;
        if (page < 0 || page > INT32_MAX || page >= num_pages) {
            PyErr_SetString(PyExc_ValueError, "a page id must be in 0..len(page_keys)-1");
            goto bad;
        }
        out[i] = (int32_t)page;
    }
    goto done;
bad:
    PyMem_Free(out);
    out = NULL;
done:
    Py_DECREF(items);
    return out;
}

/* get(page_keys, pages, mask, key) -> the key's page, or -1. */
static PyObject *get(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "get(page_keys, pages, mask, key)");
        return NULL;
    }
    uint64_t key;
    int ok = as_key(args[3], &key);
    if (ok <= 0) return ok < 0 ? NULL : PyLong_FromLong(-1); /* an int no table holds */
    Table t;
    if (table_open(&t, args[0], args[1], args[2]) < 0) return NULL;
    Py_ssize_t vacant, slot = probe(&t, key, &vacant);
    long page = slot < 0 ? -1 : (long)slot_page(&t, (uint64_t)slot);
    table_close(&t);
    return PyLong_FromLong(page);
}

/* run(page_keys, pages, mask, key_list) -> the pages of key_list's leading keys, up to the first
   key absent (a prefix lookup's level-1 walk). */
static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run(page_keys, pages, mask, key_list)");
        return NULL;
    }
    /* A read changes no slot: each key is converted when it is reached (a walk that misses at
       its first key costs one probe, not a conversion of the whole prompt's keys). */
    PyObject *items = PySequence_Tuple(args[3]);
    if (items == NULL) return NULL;
    Table t;
    if (table_open(&t, args[0], args[1], args[2]) < 0) {
        Py_DECREF(items);
        return NULL;
    }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < PyTuple_GET_SIZE(items); i++) {
        uint64_t key;
        int ok = as_key(PyTuple_GET_ITEM(items, i), &key);
        if (ok < 0) {
            Py_CLEAR(out);
            break;
        }
        Py_ssize_t vacant, slot = ok ? probe(&t, key, &vacant) : -1;
        if (slot < 0) break;
        PyObject *page = PyLong_FromLong((long)slot_page(&t, (uint64_t)slot));
        if (page == NULL || PyList_Append(out, page) < 0) Py_CLEAR(out);
        Py_XDECREF(page);
    }
    table_close(&t);
    Py_DECREF(items);
    return out;
}

/* Does `page` hold a slot now (under the key its page-key entry records)? */
static int holds_slot(const Table *t, int32_t page) {
    Py_ssize_t vacant, slot = probe(t, t->key_of[page], &vacant);
    return slot >= 0 && slot_page(t, (uint64_t)slot) == page;
}

/* claim(page_keys, pages, mask, key_list, page_list) -> (holders, placed): each key in turn as
   dict.setdefault(key, page): its holder (the page it had, or this page, placed in the empty
   slot that ends its path, its page-key entry set to the key). A page that holds a slot under
   another key is refused (ValueError; the slots placed before it stay, and the caller counts
   them again). The caller has made room (at most 70% of the slots filled after the batch). */
static PyObject *claim(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "claim(page_keys, pages, mask, key_list, page_list)");
        return NULL;
    }
    Keys k;
    if (keys_open(&k, args[3], 1) < 0) return NULL;
    Table t;
    if (table_open(&t, args[0], args[1], args[2]) < 0) {
        keys_close(&k);
        return NULL;
    }
    PyObject *holders = NULL;
    int32_t *want = pages_of(args[4], k.n, t.num_pages);
    if (want == NULL) goto done;
    holders = PyList_New(k.n);
    Py_ssize_t placed = 0;
    for (Py_ssize_t i = 0; holders != NULL && i < k.n; i++) {
        Py_ssize_t vacant, slot = probe(&t, k.keys[i], &vacant);
        if (slot < 0 && vacant < 0) {
            PyErr_SetString(PyExc_RuntimeError, "no vacant slot: the caller's fill bound broke");
            Py_CLEAR(holders);
            break;
        }
        if (slot < 0) {
            int32_t page = want[i];
            if (t.key_of[page] != k.keys[i] && holds_slot(&t, page)) {
                PyErr_SetString(PyExc_ValueError, "a page holds one slot: this one holds another");
                Py_CLEAR(holders);
                break;
            }
            placed += 1;
            t.key_of[page] = k.keys[i];
            set_slot(&t, (uint64_t)vacant, page);
            slot = vacant;
        }
        PyObject *page = PyLong_FromLong((long)slot_page(&t, (uint64_t)slot));
        if (page == NULL) {
            Py_CLEAR(holders); /* (a slot placed before stays: the caller counts again) */
            break;
        }
        PyList_SET_ITEM(holders, i, page);
    }
    if (holders != NULL) {
        PyObject *result = Py_BuildValue("(Nn)", holders, placed);
        holders = result;
    }
done:
    table_close(&t);
    PyMem_Free(want);
    keys_close(&k);
    return holders;
}

/* pop(page_keys, pages, mask, key_list) -> the page each key held (removed, its cluster closed up),
   or -1 for a key absent (ints outside 0..2**64-1 among them), in turn. */
static PyObject *pop(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "pop(page_keys, pages, mask, key_list)");
        return NULL;
    }
    Keys k;
    if (keys_open(&k, args[3], 0) < 0) return NULL;
    Table t;
    if (table_open(&t, args[0], args[1], args[2]) < 0) {
        keys_close(&k);
        return NULL;
    }
    PyObject *out = PyList_New(k.n);
    for (Py_ssize_t i = 0; out != NULL && i < k.n; i++) {
        long page = -1;
        if (k.held[i]) {
            Py_ssize_t vacant, slot = probe(&t, k.keys[i], &vacant);
            if (slot >= 0) {
                page = (long)slot_page(&t, (uint64_t)slot);
                remove_at(&t, (uint64_t)slot);
            }
        }
        PyObject *item = PyLong_FromLong(page);
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, item);
    }
    table_close(&t);
    keys_close(&k);
    return out;
}

static PyMethodDef methods[] = {
    {"get", (PyCFunction)(void (*)(void))get, METH_FASTCALL, "a key's page or -1"},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL, "pages of the leading keys held"},
    {"claim", (PyCFunction)(void (*)(void))claim, METH_FASTCALL, "setdefault, key by key"},
    {"pop", (PyCFunction)(void (*)(void))pop, METH_FASTCALL, "pop, key by key (-1: absent)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_slots", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__slots(void) { return PyModule_Create(&module); }
