/* Chained page keys in C: the loop of sim/kv/hashing.py's chained_page_keys, page by page.

   The same integer arithmetic modulo 2**64 as the numpy version, in the same terms: a page's
   content is the sum of its token ids (int32 or int64, sign-extended to 64 bits) times the
   page's odd weights, h_i = mix(content_i + i * GOLDEN), the carry is the running sum of the
   h_i, and key_i = mix(carry after page i) & key_mask. Modular sums do not depend on their
   order, so the keys are the numpy version's bit for bit (tests/sim/test_hashing.py compares
   them). The caller allocates the keys' array; nothing here allocates per page.

   Built by scripts/build_native.py, used only while sim/native.json records this source. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* A contiguous one-dimensional buffer whose format is one of `kinds`, of 8-byte items or int32. */
static int open_array(PyObject *array, Py_buffer *view, int writable, const char *kinds,
                      const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(array, view, flags) < 0) return -1;
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    int size_ok = view->itemsize == 8 || (view->itemsize == 4 && *format == 'i');
    if (view->ndim != 1 || strlen(format) != 1 || strchr(kinds, *format) == NULL || !size_ok) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s has the wrong type", what);
        return -1;
    }
    return 0;
}

static inline uint64_t token_at(const Py_buffer *tokens, Py_ssize_t i) {
    if (tokens->itemsize == 4) return (uint64_t)(int64_t)((const int32_t *)tokens->buf)[i];
    return (uint64_t)((const int64_t *)tokens->buf)[i];
}

/* chain(tokens, weights, out, first_page, carry, key_mask) -> carry

   tokens: int32 or int64 ids; weights: uint64 [page_size]; out: uint64 [num_full - first_page],
   filled with the keys of full pages first_page, first_page + 1, ...; carry: the running sum
   before first_page. Returns the running sum after the last page. */
static PyObject *chain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "chain takes 6 arguments");
        return NULL;
    }
    Py_ssize_t first = PyLong_AsSsize_t(args[3]);
    if (first == -1 && PyErr_Occurred()) return NULL;
    uint64_t carry = PyLong_AsUnsignedLongLong(args[4]);
    if (carry == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    uint64_t key_mask = PyLong_AsUnsignedLongLong(args[5]);
    if (key_mask == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_buffer tokens, weights, out;
    if (open_array(args[0], &tokens, 0, "ilq", "tokens") < 0) return NULL;
    if (open_array(args[1], &weights, 0, "QLK", "weights") < 0) {
        PyBuffer_Release(&tokens);
        return NULL;
    }
    if (open_array(args[2], &out, 1, "QLK", "out") < 0) {
        PyBuffer_Release(&tokens);
        PyBuffer_Release(&weights);
        return NULL;
    }
    Py_ssize_t page_size = weights.shape[0];
    Py_ssize_t num_full = page_size > 0 ? tokens.shape[0] / page_size : 0;
    if (page_size < 1 || first < 0 || out.shape[0] != num_full - first ||
        weights.itemsize != 8 || out.itemsize != 8) {
        PyBuffer_Release(&tokens);
        PyBuffer_Release(&weights);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "out needs one slot per full page from first_page");
        return NULL;
    }
    const uint64_t *w = (const uint64_t *)weights.buf;
    uint64_t *key = (uint64_t *)out.buf;
    for (Py_ssize_t page = first; page < num_full; page++) {
        uint64_t content = 0;
        Py_ssize_t base = page * page_size;
        for (Py_ssize_t j = 0; j < page_size; j++) content += token_at(&tokens, base + j) * w[j];
        carry += mix64(content + (uint64_t)page * GOLDEN);
        key[page - first] = mix64(carry) & key_mask;
    }
    PyBuffer_Release(&tokens);
    PyBuffer_Release(&weights);
    PyBuffer_Release(&out);
    return PyLong_FromUnsignedLongLong(carry);
}

static PyMethodDef methods[] = {
    {"chain", (PyCFunction)(void (*)(void))chain, METH_FASTCALL, "chained keys of full pages"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_pagekeys", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__pagekeys(void) { return PyModule_Create(&module); }
