/* The routing table's probe loops in C (sim/holder_table.py says what the table is).

   The table is two arrays the Python side owns: keys (uint64) and holder codes (int16: a node id,
   or SHARED, GONE, EMPTY), one slot each, linear probing from key & mask. These functions walk
   the probe paths key by key, in the order given, exactly as HolderTable's scalar methods do
   (_add_one, _join, _leave, _slot_of), the bitmasks of keys several nodes hold kept in the
   same Python dict HolderTable keeps (key -> int). A key's
   answer does not depend on where its slot is, so this and the numpy batch path (which places
   keys differently) answer every lookup the same (tests/sim/test_holder_table.py).

   Built by scripts/build_native.py, used only while sim/native.json records this source. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define SHARED (-1)
#define GONE (-2)
#define EMPTY (-3)

typedef struct {
    Py_buffer keys, holder;
    uint64_t *key;
    int16_t *code;
    uint64_t mask;
} Table;

/* The two arrays, writable, their sizes checked against the mask (a power of two minus 1). */
static int table_open(Table *t, PyObject *keys, PyObject *holder, unsigned long long mask) {
    if (PyObject_GetBuffer(keys, &t->keys, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (PyObject_GetBuffer(holder, &t->holder, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&t->keys);
        return -1;
    }
    Py_ssize_t slots = (Py_ssize_t)mask + 1;
    if (t->keys.len != slots * 8 || t->holder.len != slots * 2 || (mask & (mask + 1)) != 0) {
        PyBuffer_Release(&t->keys);
        PyBuffer_Release(&t->holder);
        PyErr_SetString(PyExc_ValueError, "keys (uint64) and holder (int16) need mask + 1 slots");
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

/* From key's home: its slot or -1, and the first vacant (GONE or EMPTY) slot on its path. */
static Py_ssize_t probe(const Table *t, uint64_t key, Py_ssize_t *vacant) {
    uint64_t slot = key & t->mask;
    *vacant = -1;
    for (;;) {
        int16_t code = t->code[slot];
        if (code == EMPTY) {
            if (*vacant < 0) *vacant = (Py_ssize_t)slot;
            return -1;
        }
        if (code == GONE) {
            if (*vacant < 0) *vacant = (Py_ssize_t)slot;
        } else if (t->key[slot] == key) {
            return (Py_ssize_t)slot;
        }
        slot = (slot + 1) & t->mask;
    }
}

static int parse(PyObject *const *args, Py_ssize_t nargs, const char *name, Table *t,
                 PyObject **seq, long *node) {
    if (nargs != 7 || !PyDict_Check(args[5]) || !PyList_Check(args[6])) {
        PyErr_Format(PyExc_TypeError, "%s(keys, holder, mask, page_keys, node, shared, bits)",
                     name);
        return -1;
    }
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[2]);
    *node = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return -1;
    if (*node < 0 || *node >= PyList_GET_SIZE(args[6])) {
        PyErr_SetString(PyExc_ValueError, "node out of range of bits");
        return -1;
    }
    *seq = PySequence_Fast(args[3], "page keys must be a sequence of ints");
    if (*seq == NULL) return -1;
    if (table_open(t, args[0], args[1], mask) < 0) {
        Py_DECREF(*seq);
        return -1;
    }
    return 0;
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
    t->code[slot] = SHARED;
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

/* add(keys, holder, mask, page_keys, node, shared, bits) -> (live_added, gone_reused): each key
   in turn, as HolderTable._add_one: a key held by others joins their bitmask (`shared`: key ->
   bitmask; bits[i] = 1 << i); an absent one takes the first vacant slot on its path. The caller
   has made room (at most 70% of the slots filled after the batch). */
static PyObject *add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Table t;
    PyObject *seq;
    long node;
    if (parse(args, nargs, "add", &t, &seq, &node) < 0) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), live = 0, gone = 0, i;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (i = 0; i < n; i++) {
        uint64_t key = PyLong_AsUnsignedLongLong(items[i]);
        if (key == (uint64_t)-1 && PyErr_Occurred()) break;
        Py_ssize_t vacant, slot = probe(&t, key, &vacant);
        if (slot >= 0) {
            if (join(&t, slot, items[i], node, args[5], args[6]) < 0) break;
            continue;
        }
        gone += t.code[vacant] == GONE;
        live += 1;
        t.key[vacant] = key;
        t.code[vacant] = (int16_t)node;
    }
    table_close(&t);
    Py_DECREF(seq);
    if (i < n) return NULL;
    return Py_BuildValue("(nn)", live, gone);
}

/* remove(keys, holder, mask, page_keys, node, shared, bits) -> live_removed: each key in turn,
   as HolderTable._leave: one the node alone holds becomes a tombstone, a shared one loses the
   node's bit; others are left alone. */
static PyObject *remove_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Table t;
    PyObject *seq;
    long node;
    if (parse(args, nargs, "remove", &t, &seq, &node) < 0) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), removed = 0, i;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (i = 0; i < n; i++) {
        uint64_t key = PyLong_AsUnsignedLongLong(items[i]);
        if (key == (uint64_t)-1 && PyErr_Occurred()) break;
        Py_ssize_t vacant, slot = probe(&t, key, &vacant);
        if (slot < 0) continue;
        if (t.code[slot] == node) {
            t.code[slot] = GONE;
            removed += 1;
        } else if (t.code[slot] == SHARED) {
            if (leave_shared(&t, slot, items[i], node, args[5], args[6]) < 0) break;
        }
    }
    table_close(&t);
    Py_DECREF(seq);
    if (i < n) return NULL;
    return PyLong_FromSsize_t(removed);
}

/* slot_of(keys, holder, mask, key) -> the slot holding key, or -1 (HolderTable._slot_of). */
static PyObject *slot_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "slot_of(keys, holder, mask, key)");
        return NULL;
    }
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[2]);
    uint64_t key = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Table t;
    if (table_open(&t, args[0], args[1], mask) < 0) return NULL;
    Py_ssize_t vacant, slot = probe(&t, key, &vacant);
    table_close(&t);
    return PyLong_FromSsize_t(slot);
}

static PyMethodDef methods[] = {
    {"add", (PyCFunction)(void (*)(void))add, METH_FASTCALL, "keys gain a holder"},
    {"remove", (PyCFunction)(void (*)(void))remove_keys, METH_FASTCALL, "keys lose a holder"},
    {"slot_of", (PyCFunction)(void (*)(void))slot_of, METH_FASTCALL, "a key's slot or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_holders", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__holders(void) { return PyModule_Create(&module); }
