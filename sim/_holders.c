/* The routing table's probe loops in C (sim/holder_table.py says what the table is).

   The table is two arrays the Python side owns: keys (uint64) and holder codes (int16: a node id,
   SHARED, or EMPTY), one slot each, linear probing from key & mask. These functions walk the
   probe paths key by key, in the order given, the bitmasks of keys several nodes hold kept in
   the same Python dict HolderTable keeps (key -> int). A key's answer does not depend on where
   its slot is, so this and the numpy batch path (which places keys differently and leaves
   tombstones) answer every lookup the same (tests/sim/test_holder_table.py).

   A key the last node leaves is removed and its cluster closed up behind it (backward-shift
   deletion, as sim/_slots.c does), so no probe path crosses an empty slot before its key and
   there are no tombstones: the table is rebuilt only to grow, never to shed removed keys (a
   rebuild at 256 nodes copied ~9M keys, ~280 MB of transient memory, every few million
   removals), and `rehash` grows it in place of numpy's temporaries.

   Built by scripts/build_native.py, used only while sim/native.json records this source. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SHARED (-1)
#define EMPTY (-3)

typedef struct {
    Py_buffer keys, holder;
    uint64_t *key;
    int16_t *code;
    uint64_t mask;
} Table;

/* One array's buffer: writable, contiguous, one-dimensional, of this item size and format kind. */
static int open_array(PyObject *array, Py_buffer *view, Py_ssize_t itemsize, const char *kinds) {
    int flags = PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(array, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    if (view->ndim != 1 || view->itemsize != itemsize || strlen(format) != 1 ||
        strchr(kinds, *format) == NULL) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "keys must be uint64 and holder int16 arrays");
        return -1;
    }
    return 0;
}

/* The two arrays, their sizes checked against the mask (a power of two minus 1). */
static int table_open(Table *t, PyObject *keys, PyObject *holder, unsigned long long mask) {
    if (mask >= (unsigned long long)(PY_SSIZE_T_MAX / 8) || (mask & (mask + 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "mask must be a power of two minus 1");
        return -1;
    }
    if (open_array(keys, &t->keys, 8, "QLK") < 0) return -1;
    if (open_array(holder, &t->holder, 2, "h") < 0) {
        PyBuffer_Release(&t->keys);
        return -1;
    }
    Py_ssize_t slots = (Py_ssize_t)mask + 1;
    if (t->keys.shape[0] != slots || t->holder.shape[0] != slots) {
        PyBuffer_Release(&t->keys);
        PyBuffer_Release(&t->holder);
        PyErr_SetString(PyExc_ValueError, "keys and holder need mask + 1 slots");
        return -1;
    }
    t->key = (uint64_t *)t->keys.buf;
    t->code = (int16_t *)t->holder.buf;
    t->mask = (uint64_t)mask;
    return 0;
}

static void table_close(Table *t) {
    PyBuffer_Release(&t->keys);
    PyBuffer_Release(&t->holder);
}

/* From key's home: its slot or -1, and the EMPTY slot that ends its path (where it would go;
   -1 if none: a table without an EMPTY slot, which the caller's fill bound rules out, is walked
   once round and never loops). */
static Py_ssize_t probe(const Table *t, uint64_t key, Py_ssize_t *vacant) {
    uint64_t slot = key & t->mask;
    *vacant = -1;
    for (uint64_t steps = 0; steps <= t->mask; steps++) {
        if (t->code[slot] == EMPTY) {
            *vacant = (Py_ssize_t)slot;
            return -1;
        }
        if (t->key[slot] == key) return (Py_ssize_t)slot;
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
        if (t->code[next] == EMPTY) break;
        uint64_t home = t->key[next] & mask;
        if (((next - home) & mask) < ((next - gap) & mask)) continue; /* home in (gap, next] */
        t->key[gap] = t->key[next];
        t->code[gap] = t->code[next];
        gap = next;
    }
    t->key[gap] = 0;
    t->code[gap] = EMPTY;
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

/* The call's arguments, every key converted before anything changes: a batch fails whole.
   items: the keys as given (a tuple the caller releases); keys[i] with held[i] = 0 for an int
   no table can hold (add refuses it). */
typedef struct {
    Table t;
    PyObject *items;
    uint64_t *keys;
    char *held;
    Py_ssize_t n;
    long node;
} Call;

/* The exception a batch stopped at (taken off the error indicator), or None: the slots changed
   before it are counted all the same, so the caller keeps its counts and then raises it. */
static PyObject *failure(int failed) {
    if (!failed) Py_RETURN_NONE;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    if (value == NULL) Py_RETURN_NONE;
    return value;
}

static void call_close(Call *c) {
    table_close(&c->t);
    Py_DECREF(c->items);
    PyMem_Free(c->keys);
    PyMem_Free(c->held);
}

static int call_open(Call *c, PyObject *const *args, Py_ssize_t nargs, const char *name,
                     int refuse_unholdable) {
    if (nargs != 7 || !PyDict_Check(args[5]) || !PyList_Check(args[6])) {
        PyErr_Format(PyExc_TypeError, "%s(keys, holder, mask, page_keys, node, shared, bits)",
                     name);
        return -1;
    }
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[2]);
    if (mask == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    c->node = PyLong_AsLong(args[4]);
    if (c->node == -1 && PyErr_Occurred()) return -1;
    if (c->node < 0 || c->node >= PyList_GET_SIZE(args[6]) || c->node > INT16_MAX) {
        PyErr_SetString(PyExc_ValueError, "node out of range of bits");
        return -1;
    }
    c->items = PySequence_Tuple(args[3]);  /* owned: no caller code can change it meanwhile */
    if (c->items == NULL) return -1;
    c->n = PyTuple_GET_SIZE(c->items);
    c->keys = PyMem_Malloc(sizeof(uint64_t) * (size_t)(c->n ? c->n : 1));
    c->held = PyMem_Malloc((size_t)(c->n ? c->n : 1));
    if (c->keys == NULL || c->held == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < c->n; i++) {
        int ok = as_key(PyTuple_GET_ITEM(c->items, i), &c->keys[i]);
        if (ok < 0) goto fail;
        if (ok == 0 && refuse_unholdable) {
            PyErr_SetString(PyExc_OverflowError, "a page key must be in 0..2**64-1");
            goto fail;
        }
        c->held[i] = (char)ok;
    }
    if (table_open(&c->t, args[0], args[1], mask) < 0) goto fail;
    return 0;
fail:
    Py_DECREF(c->items);
    PyMem_Free(c->keys);
    PyMem_Free(c->held);
    return -1;
}

/* HolderTable._join: `node` holds the key at `slot` too (its bitmask kept in `shared`). */
static int join(Table *t, Py_ssize_t slot, PyObject *key, long node, PyObject *shared,
                PyObject *bits) {
    int16_t code = t->code[slot];
    if (code == node) return 0;
    PyObject *bit = PyList_GET_ITEM(bits, node), *joined;
    if (code == SHARED) {
        PyObject *holders = PyDict_GetItemWithError(shared, key);  /* borrowed */
        if (holders == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
            return -1;
        }
        joined = PyNumber_Or(holders, bit);
    } else {
        if (code < 0 || code >= PyList_GET_SIZE(bits)) {
            PyErr_SetString(PyExc_ValueError, "holder code out of range of bits");
            return -1;
        }
        joined = PyNumber_Or(PyList_GET_ITEM(bits, code), bit);
    }
    if (joined == NULL) return -1;
    int failed = PyDict_SetItem(shared, key, joined);
    Py_DECREF(joined);
    if (failed == 0) t->code[slot] = SHARED;
    return failed;
}

/* int(value.method()), -1 with an exception set on failure. */
static long long call_for_long(PyObject *value, const char *method) {
    PyObject *result = PyObject_CallMethod(value, method, NULL);
    if (result == NULL) return -1;
    long long out = PyLong_AsLongLong(result);
    Py_DECREF(result);
    return out;
}

/* HolderTable._leave for a shared key: `node` no longer holds it; one holder left, its code. */
static int leave_shared(Table *t, Py_ssize_t slot, PyObject *key, long node, PyObject *shared,
                        PyObject *bits) {
    PyObject *holders = PyDict_GetItemWithError(shared, key);  /* borrowed */
    if (holders == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    PyObject *others = PyNumber_Invert(PyList_GET_ITEM(bits, node));
    if (others == NULL) return -1;
    PyObject *rest = PyNumber_And(holders, others);
    Py_DECREF(others);
    if (rest == NULL) return -1;
    long long count = call_for_long(rest, "bit_count");
    int failed = -1;
    if (count >= 2) { /* still two or more */
        failed = PyDict_SetItem(shared, key, rest);
    } else if (count == 1) { /* one left: its node's code, as before it was shared */
        long long width = call_for_long(rest, "bit_length");
        if (width > 0 && PyDict_DelItem(shared, key) == 0) {
            t->code[slot] = (int16_t)(width - 1);
            failed = 0;
        }
    } else if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "a shared key with one holder or none");
    }
    Py_DECREF(rest);
    return failed;
}

/* add(keys, holder, mask, page_keys, node, shared, bits) -> (live_added, error): each key in
   turn: a key held by others joins their bitmask (`shared`: key -> bitmask; bits[i] = 1 << i);
   an absent one takes the empty slot that ends its path. Every key is converted first: a key that is not an int in 0..2**64-1 fails the
   batch before it changes anything. The caller has made room (at most 70% of the slots filled
   after the batch). */
static PyObject *add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Call c;
    if (call_open(&c, args, nargs, "add", 1) < 0) return NULL;
    Py_ssize_t live = 0, i;
    for (i = 0; i < c.n; i++) {
        uint64_t key = c.keys[i];
        Py_ssize_t vacant, slot = probe(&c.t, key, &vacant);
        if (slot >= 0) {
            if (join(&c.t, slot, PyTuple_GET_ITEM(c.items, i), c.node, args[5], args[6]) < 0)
                break;
            continue;
        }
        if (vacant < 0) {
            PyErr_SetString(PyExc_RuntimeError, "the table is full (its fill bound was not kept)");
            break;
        }
        live += 1;
        c.t.key[vacant] = key;
        c.t.code[vacant] = (int16_t)c.node;
    }
    call_close(&c);
    return Py_BuildValue("(nN)", live, failure(i < c.n));
}

/* remove(keys, holder, mask, page_keys, node, shared, bits) -> (live_removed, error): each key
   in turn: one the node alone holds is removed (its cluster closed up), a shared one loses the
   node's bit; others (ints outside 0..2**64-1 among them) are left alone. */
static PyObject *remove_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Call c;
    if (call_open(&c, args, nargs, "remove", 0) < 0) return NULL;
    Py_ssize_t removed = 0, i;
    for (i = 0; i < c.n; i++) {
        if (!c.held[i]) continue;  /* an int no table holds */
        Py_ssize_t vacant, slot = probe(&c.t, c.keys[i], &vacant);
        if (slot < 0) continue;
        if (c.t.code[slot] == c.node) {
            remove_at(&c.t, (uint64_t)slot);
            removed += 1;
        } else if (c.t.code[slot] == SHARED) {
            if (leave_shared(&c.t, slot, PyTuple_GET_ITEM(c.items, i), c.node, args[5], args[6]) < 0)
                break;
        }
    }
    call_close(&c);
    return Py_BuildValue("(nN)", removed, failure(i < c.n));
}

/* slot_of(keys, holder, mask, key) -> the slot holding key, or -1 (HolderTable._slot_of). */
static PyObject *slot_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "slot_of(keys, holder, mask, key)");
        return NULL;
    }
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[2]);
    if (mask == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    uint64_t key;
    int ok = as_key(args[3], &key);
    if (ok <= 0) return ok < 0 ? NULL : PyLong_FromLong(-1);  /* an int no table holds */
    Table t;
    if (table_open(&t, args[0], args[1], mask) < 0) return NULL;
    Py_ssize_t vacant, slot = probe(&t, key, &vacant);
    table_close(&t);
    return PyLong_FromSsize_t(slot);
}

/* rehash(keys, holder, mask, new_keys, new_holder, new_mask) -> keys placed: every live key of
   the old table (with its code) placed in the new, empty one, slot by slot (a growth without
   numpy's copies of the live keys, codes and homes). The caller sized the new table to hold
   them within its fill bound. */
static PyObject *rehash(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "rehash(keys, holder, mask, new_keys, new_holder, new_mask)");
        return NULL;
    }
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[2]);
    if (mask == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    unsigned long long new_mask = PyLong_AsUnsignedLongLong(args[5]);
    if (new_mask == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Table old, grown;
    if (table_open(&old, args[0], args[1], mask) < 0) return NULL;
    if (table_open(&grown, args[3], args[4], new_mask) < 0) {
        table_close(&old);
        return NULL;
    }
    Py_ssize_t placed = 0, failed = 0;
    for (uint64_t i = 0; i <= old.mask; i++) {
        if (old.code[i] == EMPTY) continue;
        Py_ssize_t vacant, slot = probe(&grown, old.key[i], &vacant);
        if (slot >= 0 || vacant < 0) { /* a key twice, or no room: the caller's bound broken */
            failed = 1;
            break;
        }
        grown.key[vacant] = old.key[i];
        grown.code[vacant] = old.code[i];
        placed += 1;
    }
    table_close(&old);
    table_close(&grown);
    if (failed) {
        PyErr_SetString(PyExc_ValueError, "rehash: a key twice, or the new table too small");
        return NULL;
    }
    return PyLong_FromSsize_t(placed);
}

static PyMethodDef methods[] = {
    {"add", (PyCFunction)(void (*)(void))add, METH_FASTCALL, "keys gain a holder"},
    {"remove", (PyCFunction)(void (*)(void))remove_keys, METH_FASTCALL, "keys lose a holder"},
    {"slot_of", (PyCFunction)(void (*)(void))slot_of, METH_FASTCALL, "a key's slot or -1"},
    {"rehash", (PyCFunction)(void (*)(void))rehash, METH_FASTCALL, "live keys into a new table"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_holders", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__holders(void) { return PyModule_Create(&module); }
