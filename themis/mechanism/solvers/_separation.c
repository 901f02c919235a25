/* Compiled cores of the cut separation (themis.mechanism.solvers.cuts); each returns what
 * its pure-Python reference in cuts.py returns (the tests compare them).
 *
 * zero_half_combinations(parity, useful), the GF(2) core of zero_half_cuts, takes the tight rows' parity matrix (uint8, rows x
 * (k + 1): the odd coefficients on the k support columns, then the parity of the rhs)
 * and a flag per row (it has a fractional column). Rows are linked when they share a
 * support column; for each linked part holding a flagged row, in the order of the part's
 * first row, it returns the rows (ascending) whose mod-2 sum is exactly (0, ..., 0, 1) -
 * even on every support column, odd rhs - found by Gaussian elimination (pivot: the
 * highest set bit, rows taken in order), or skips the part when there is none. Rows that
 * are all zero take no part. Same rows, same order as the pure-Python version
 * (cuts._combination over cuts._linked parts), which stays the reference in the tests. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int find(int *parent, int a) {
    while (parent[a] != a) {
        parent[a] = parent[parent[a]];
        a = parent[a];
    }
    return a;
}

static int top_bit(const uint64_t *v, int words) {
    for (int w = words - 1; w >= 0; w--)
        if (v[w]) return w * 64 + 63 - __builtin_clzll(v[w]);
    return -1;
}

static PyObject *combinations_core(const uint8_t *p, const uint8_t *u, int n_rows, int width);

static PyObject *zero_half_combinations(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_par, *o_use;
    if (!PyArg_ParseTuple(args, "OO", &o_par, &o_use)) return NULL;
    Py_buffer par, use;
    if (PyObject_GetBuffer(o_par, &par, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
    if (par.ndim != 2 || par.itemsize != 1) {
        PyBuffer_Release(&par);
        PyErr_SetString(PyExc_ValueError, "parity: a 2-d uint8 or bool array");
        return NULL;
    }
    int n_rows = (int)par.shape[0], width = (int)par.shape[1];
    if (width < 1) {
        PyBuffer_Release(&par);
        PyErr_SetString(PyExc_ValueError, "parity: needs the rhs column");
        return NULL;
    }
    if (PyObject_GetBuffer(o_use, &use, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&par);
        return NULL;
    }
    if (use.itemsize != 1 || use.len != n_rows) {
        PyBuffer_Release(&par);
        PyBuffer_Release(&use);
        PyErr_SetString(PyExc_ValueError, "useful: one uint8 or bool per row");
        return NULL;
    }
    PyObject *out = combinations_core(par.buf, use.buf, n_rows, width);
    PyBuffer_Release(&par);
    PyBuffer_Release(&use);
    return out;
}

/* The GF(2) core on a parity matrix in memory (rows x width, the rhs parity last). */
static PyObject *combinations_core(const uint8_t *p, const uint8_t *u, int n_rows, int width) {
    int k = width - 1, words = (width + 63) / 64;
    PyObject *out = PyList_New(0);
    int *parent = malloc((n_rows ? n_rows : 1) * sizeof(int));
    int *col_first = malloc((k ? k : 1) * sizeof(int));
    int *order = malloc((n_rows ? n_rows : 1) * sizeof(int));
    int *part_of = malloc((n_rows ? n_rows : 1) * sizeof(int));
    uint64_t *rows = calloc((size_t)(n_rows ? n_rows : 1) * words, sizeof(uint64_t));
    if (!out || !parent || !col_first || !order || !part_of || !rows) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int r = 0; r < n_rows; r++) parent[r] = r;
    for (int c = 0; c < k; c++) col_first[c] = -1;
    for (int r = 0; r < n_rows; r++) {
        const uint8_t *row = p + (size_t)r * width;
        for (int c = 0; c < width; c++) {
            if (!row[c]) continue;
            rows[(size_t)r * words + c / 64] |= (uint64_t)1 << (c % 64);
            if (c == k) continue;
            if (col_first[c] < 0) {
                col_first[c] = r;
            } else {
                int a = find(parent, col_first[c]), b = find(parent, r);
                if (a != b) parent[a < b ? b : a] = a < b ? a : b;
            }
        }
    }
    /* parts in the order of their first non-zero row; which have a flagged row */
    int n_parts = 0;
    int *root_part = malloc((n_rows ? n_rows : 1) * sizeof(int));
    char *flag = calloc(n_rows ? n_rows : 1, 1);
    if (!root_part || !flag) {
        free(root_part);
        free(flag);
        PyErr_NoMemory();
        goto fail;
    }
    for (int r = 0; r < n_rows; r++) root_part[r] = -1;
    for (int r = 0; r < n_rows; r++) {
        part_of[r] = -1;
        int nz = 0;
        for (int w = 0; w < words; w++) nz |= rows[(size_t)r * words + w] != 0;
        if (!nz) continue;
        int root = find(parent, r);
        if (root_part[root] < 0) root_part[root] = n_parts++;
        part_of[r] = root_part[root];
    }
    for (int r = 0; r < n_rows; r++)
        if (u[r]) {
            int root = find(parent, r);
            if (root_part[root] >= 0) flag[root_part[root]] = 1;
        }
    free(root_part);
    /* elimination per part */
    uint64_t *basis = NULL, *combo = NULL, *m = NULL, *cm = NULL;
    int *has = NULL;
    int cwords_cap = 0;
    for (int part = 0; part < n_parts; part++) {
        if (!flag[part]) continue;
        int g = 0;
        for (int r = 0; r < n_rows; r++)
            if (part_of[r] == part) order[g++] = r;
        int cwords = (g + 63) / 64;
        if (cwords > cwords_cap || !basis) {
            free(basis); free(combo); free(m); free(cm); free(has);
            cwords_cap = cwords;
            basis = malloc((size_t)width * words * sizeof(uint64_t));
            combo = malloc((size_t)width * cwords_cap * sizeof(uint64_t));
            m = malloc(words * sizeof(uint64_t));
            cm = malloc(cwords_cap * sizeof(uint64_t));
            has = malloc(width * sizeof(int));
            if (!basis || !combo || !m || !cm || !has) {
                free(basis); free(combo); free(m); free(cm); free(has); free(flag);
                PyErr_NoMemory();
                goto fail;
            }
        }
        for (int b = 0; b < width; b++) has[b] = 0;
        for (int j = 0; j < g; j++) {
            memcpy(m, rows + (size_t)order[j] * words, words * sizeof(uint64_t));
            memset(cm, 0, cwords * sizeof(uint64_t));
            cm[j / 64] |= (uint64_t)1 << (j % 64);
            for (;;) {
                int top = top_bit(m, words);
                if (top < 0) break;
                if (!has[top]) {
                    has[top] = 1;
                    memcpy(basis + (size_t)top * words, m, words * sizeof(uint64_t));
                    memcpy(combo + (size_t)top * cwords_cap, cm, cwords * sizeof(uint64_t));
                    break;
                }
                for (int w = 0; w < words; w++) m[w] ^= basis[(size_t)top * words + w];
                for (int w = 0; w < cwords; w++) cm[w] ^= combo[(size_t)top * cwords_cap + w];
            }
        }
        /* reduce the target e_k */
        memset(m, 0, words * sizeof(uint64_t));
        m[k / 64] |= (uint64_t)1 << (k % 64);
        memset(cm, 0, cwords * sizeof(uint64_t));
        int ok = 1;
        for (;;) {
            int top = top_bit(m, words);
            if (top < 0) break;
            if (!has[top]) {
                ok = 0;
                break;
            }
            for (int w = 0; w < words; w++) m[w] ^= basis[(size_t)top * words + w];
            for (int w = 0; w < cwords; w++) cm[w] ^= combo[(size_t)top * cwords_cap + w];
        }
        if (!ok) continue;
        PyObject *lst = PyList_New(0);
        if (!lst) {
            free(basis); free(combo); free(m); free(cm); free(has); free(flag);
            goto fail;
        }
        for (int j = 0; j < g; j++)
            if (cm[j / 64] >> (j % 64) & 1) {
                PyObject *v = PyLong_FromLong(order[j]);
                if (!v || PyList_Append(lst, v) < 0) {
                    Py_XDECREF(v);
                    Py_DECREF(lst);
                    free(basis); free(combo); free(m); free(cm); free(has); free(flag);
                    goto fail;
                }
                Py_DECREF(v);
            }
        if (PyList_Append(out, lst) < 0) {
            Py_DECREF(lst);
            free(basis); free(combo); free(m); free(cm); free(has); free(flag);
            goto fail;
        }
        Py_DECREF(lst);
    }
    free(basis); free(combo); free(m); free(cm); free(has); free(flag);
    free(parent); free(col_first); free(order); free(part_of); free(rows);
    return out;
fail:
    Py_XDECREF(out);
    free(parent); free(col_first); free(order); free(part_of); free(rows);
    return NULL;
}


/* cliques(x, conflict, limit): the clique cuts of cuts.clique_cuts (see there): from each
 * fractional column (largest x first; ties by index) not yet in a cut, a clique of
 * support columns grown greedily by largest x (ties: smallest index), kept when its x
 * sum exceeds 1 + tol, then extended with columns at 0 adjacent to every member, most
 * conflicts among themselves first (ties: smallest index). Returns sorted column lists. */
static const double *g_x;
static int by_x_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_x[i] > g_x[j]) return -1;
    if (g_x[i] < g_x[j]) return 1;
    return i - j;
}
static const int *g_key;
static int by_key_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_key[i] != g_key[j]) return g_key[i] > g_key[j] ? -1 : 1;
    return i - j;
}
static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static PyObject *cliques(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_x, *o_c;
    int limit;
    double tol;
    if (!PyArg_ParseTuple(args, "OOid", &o_x, &o_c, &limit, &tol)) return NULL;
    Py_buffer bx, bc;
    if (PyObject_GetBuffer(o_x, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (strcmp(bx.format, "d") != 0) {
        PyBuffer_Release(&bx);
        PyErr_SetString(PyExc_ValueError, "x: a float64 array");
        return NULL;
    }
    int n = (int)(bx.len / 8);
    if (PyObject_GetBuffer(o_c, &bc, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    if (bc.itemsize != 1 || bc.len != (Py_ssize_t)n * n) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&bc);
        PyErr_SetString(PyExc_ValueError, "conflict: an n x n uint8 or bool matrix");
        return NULL;
    }
    const double *x = bx.buf;
    const uint8_t *c = bc.buf;
    PyObject *out = PyList_New(0);
    int *frac = malloc((n ? n : 1) * sizeof(int));
    int *sup = malloc((n ? n : 1) * sizeof(int));
    int *clique = malloc((n ? n : 1) * sizeof(int));
    int *rest = malloc((n ? n : 1) * sizeof(int));
    int *key = malloc((n ? n : 1) * sizeof(int));
    int *ord = malloc((n ? n : 1) * sizeof(int));
    char *cand = malloc(n ? n : 1), *covered = calloc(n ? n : 1, 1), *keep = malloc(n ? n : 1);
    if (!out || !frac || !sup || !clique || !rest || !key || !ord || !cand || !covered || !keep) {
        PyErr_NoMemory();
        goto done;
    }
    int nf = 0, ns = 0;
    for (int j = 0; j < n; j++) {
        if (x[j] > tol) sup[ns++] = j;
        if (x[j] > tol && x[j] < 1.0 - tol) frac[nf++] = j;
    }
    g_x = x;
    qsort(frac, nf, sizeof(int), by_x_desc);
    int found = 0;
    for (int f = 0; f < nf && found < limit; f++) {
        int s = frac[f];
        if (covered[s]) continue;
        int nq = 0;
        clique[nq++] = s;
        int any = 0;
        for (int t = 0; t < ns; t++) any |= cand[t] = c[(size_t)s * n + sup[t]] != 0;
        while (any) {
            int best = -1;
            for (int t = 0; t < ns; t++)
                if (cand[t] && (best < 0 || x[sup[t]] > x[sup[best]])) best = t;
            int v = sup[best];
            clique[nq++] = v;
            any = 0;
            for (int t = 0; t < ns; t++) {
                cand[t] = cand[t] && c[(size_t)v * n + sup[t]];
                any |= cand[t];
            }
        }
        double sum = 0.0;
        for (int q = 0; q < nq; q++) sum += x[clique[q]];
        if (sum <= 1.0 + tol) continue;
        for (int q = 0; q < nq; q++) covered[clique[q]] = 1;
        int nr = 0;
        for (int j = 0; j < n; j++) {
            if (x[j] > tol) continue;
            int all = 1;
            for (int q = 0; q < nq && all; q++) all = c[(size_t)clique[q] * n + j] != 0;
            if (all) rest[nr++] = j;
        }
        int members = nq;
        if (nr) {
            for (int a = 0; a < nr; a++) {
                int deg = 0;
                for (int b = 0; b < nr; b++) deg += c[(size_t)rest[a] * n + rest[b]] != 0;
                key[a] = deg;
                ord[a] = a;
                keep[a] = 1;
            }
            g_key = key;
            qsort(ord, nr, sizeof(int), by_key_desc);
            for (int o = 0; o < nr; o++) {
                int a = ord[o];
                if (!keep[a]) continue;
                clique[members++] = rest[a];
                for (int b = 0; b < nr; b++) keep[b] = keep[b] && c[(size_t)rest[a] * n + rest[b]];
            }
        }
        qsort(clique, members, sizeof(int), cmp_int);
        PyObject *lst = PyList_New(members);
        if (!lst) goto fail;
        for (int q = 0; q < members; q++) {
            PyObject *v = PyLong_FromLong(clique[q]);
            if (!v) {
                Py_DECREF(lst);
                goto fail;
            }
            PyList_SET_ITEM(lst, q, v);
        }
        if (PyList_Append(out, lst) < 0) {
            Py_DECREF(lst);
            goto fail;
        }
        Py_DECREF(lst);
        found++;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    free(frac); free(sup); free(clique); free(rest); free(key); free(ord);
    free(cand); free(covered); free(keep);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bc);
    return out;
}

/* conflict_fill(out, row_of, col_of): out is a zeroed n x n uint8 matrix; sets out[a, b]
 * for every two columns a != b sharing a row, from the LP's non-zeros (row_of[k],
 * col_of[k]); what cuts.conflict_matrix_py computes (the tests compare them). */
static PyObject *conflict_fill(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_out, *o_row, *o_col;
    if (!PyArg_ParseTuple(args, "OOO", &o_out, &o_row, &o_col)) return NULL;
    Py_buffer bo, br, bcol;
    if (PyObject_GetBuffer(o_out, &bo, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND) < 0)
        return NULL;
    if (bo.ndim != 2 || bo.itemsize != 1 || bo.shape[0] != bo.shape[1]) {
        PyBuffer_Release(&bo);
        PyErr_SetString(PyExc_ValueError, "out: an n x n uint8 or bool matrix");
        return NULL;
    }
    if (PyObject_GetBuffer(o_row, &br, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bo);
        return NULL;
    }
    if (PyObject_GetBuffer(o_col, &bcol, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bo);
        PyBuffer_Release(&br);
        return NULL;
    }
    PyObject *result = NULL;
    int *count = NULL, *first = NULL, *members = NULL;
    if (br.itemsize != 4 || bcol.itemsize != 4 || br.len != bcol.len) {
        PyErr_SetString(PyExc_ValueError, "row_of, col_of: int32 arrays of the same length");
        goto done;
    }
    Py_ssize_t n = bo.shape[0], nnz = br.len / 4;
    const int32_t *row = br.buf, *col = bcol.buf;
    uint8_t *out = bo.buf;
    int32_t m = 0;
    for (Py_ssize_t k = 0; k < nnz; k++) {
        if (row[k] < 0 || col[k] < 0 || col[k] >= n) {
            PyErr_SetString(PyExc_ValueError, "row_of, col_of: an entry out of range");
            goto done;
        }
        if (row[k] + 1 > m) m = row[k] + 1;
    }
    count = calloc((size_t)m + 1, sizeof(int));
    first = calloc((size_t)m + 1, sizeof(int));
    members = malloc((nnz ? (size_t)nnz : 1) * sizeof(int));
    if (!count || !first || !members) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nnz; k++) count[row[k] + 1]++;
    for (int32_t r = 0; r < m; r++) count[r + 1] += count[r];  /* count[r]: start of row r */
    memcpy(first, count, ((size_t)m + 1) * sizeof(int));
    for (Py_ssize_t k = 0; k < nnz; k++) members[first[row[k]]++] = col[k];
    for (int32_t r = 0; r < m; r++)
        for (int a = count[r]; a < count[r + 1]; a++) {
            uint8_t *line = out + (size_t)members[a] * n;
            for (int b = count[r]; b < count[r + 1]; b++) line[members[b]] = 1;
        }
    for (Py_ssize_t a = 0; a < n; a++) out[a * n + a] = 0;
    result = Py_None;
    Py_INCREF(result);
done:
    free(count); free(first); free(members);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&br);
    PyBuffer_Release(&bcol);
    return result;
}

/* solve_mod(system, target, k): a solution u in {0..k-1}^n of system @ u = target (mod k),
 * k prime, by Gauss-Jordan elimination (pivot: the first row at or below the current one
 * with a non-zero in the column; free unknowns 0), as a list, or None when there is
 * none; what cuts._solve_mod_py returns (the tests compare them). */
static PyObject *solve_mod(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_sys, *o_tgt;
    long long k;
    if (!PyArg_ParseTuple(args, "OOL", &o_sys, &o_tgt, &k)) return NULL;
    if (k < 2 || k > 1000) {
        PyErr_SetString(PyExc_ValueError, "k: a prime between 2 and 1000");
        return NULL;
    }
    Py_buffer bs, bt;
    if (PyObject_GetBuffer(o_sys, &bs, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
    if (PyObject_GetBuffer(o_tgt, &bt, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bs);
        return NULL;
    }
    PyObject *result = NULL;
    long long *aug = NULL;
    int *pivots = NULL;
    if (bs.ndim != 2 || bs.itemsize != 8 || bt.itemsize != 8 || bt.len / 8 != bs.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "system: int64 (equations, unknowns); target: int64 "
                                          "(equations,)");
        goto done;
    }
    Py_ssize_t n_eq = bs.shape[0], n_var = bs.shape[1], w = n_var + 1;
    const long long *sys = bs.buf, *tgt = bt.buf;
    aug = malloc((size_t)(n_eq ? n_eq : 1) * (size_t)w * sizeof(long long));
    pivots = malloc((size_t)(n_var ? n_var : 1) * sizeof(int));
    if (!aug || !pivots) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_eq; i++) {
        for (Py_ssize_t j = 0; j < n_var; j++) aug[i * w + j] = ((sys[i * n_var + j] % k) + k) % k;
        aug[i * w + n_var] = ((tgt[i] % k) + k) % k;
    }
    Py_ssize_t r = 0;
    int n_piv = 0;
    for (Py_ssize_t c = 0; c < n_var && r < n_eq; c++) {
        Py_ssize_t pick = -1;
        for (Py_ssize_t i = r; i < n_eq; i++)
            if (aug[i * w + c]) {
                pick = i;
                break;
            }
        if (pick < 0) continue;
        if (pick != r)
            for (Py_ssize_t j = 0; j < w; j++) {
                long long t = aug[r * w + j];
                aug[r * w + j] = aug[pick * w + j];
                aug[pick * w + j] = t;
            }
        long long inv = 1, base = aug[r * w + c], e = k - 2;  /* Fermat: base^(k-2) mod k */
        while (e > 0) {
            if (e & 1) inv = inv * base % k;
            base = base * base % k;
            e >>= 1;
        }
        for (Py_ssize_t j = 0; j < w; j++) aug[r * w + j] = aug[r * w + j] * inv % k;
        for (Py_ssize_t i = 0; i < n_eq; i++) {
            long long f = aug[i * w + c];
            if (i == r || !f) continue;
            for (Py_ssize_t j = 0; j < w; j++)
                aug[i * w + j] = (((aug[i * w + j] - f * aug[r * w + j]) % k) + k) % k;
        }
        pivots[n_piv++] = (int)c;
        r++;
    }
    for (Py_ssize_t i = r; i < n_eq; i++)
        if (aug[i * w + n_var]) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
    result = PyList_New(n_var);
    if (!result) goto done;
    for (Py_ssize_t j = 0; j < n_var; j++) {
        PyObject *v = PyLong_FromLong(0);
        if (!v) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, j, v);
    }
    for (int p = 0; p < n_piv; p++) {
        PyObject *v = PyLong_FromLongLong(aug[(Py_ssize_t)p * w + n_var]);
        if (!v) {
            Py_CLEAR(result);
            goto done;
        }
        Py_SETREF(PyList_GET_ITEM(result, pivots[p]), v);
    }
done:
    free(aug);
    free(pivots);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bt);
    return result;
}

/* A row's integer arrays (cols or coefs): int32 or int64, read as long long. */
typedef struct {
    Py_buffer buf;
    int wide; /* itemsize 8 */
} IntVec;

static int intvec_get(PyObject *row, const char *attr, IntVec *v) {
    PyObject *a = PyObject_GetAttrString(row, attr);
    if (!a) return -1;
    int rc = PyObject_GetBuffer(a, &v->buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
    Py_DECREF(a);
    if (rc < 0) return -1;
    const char *f = v->buf.format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    if (!((v->buf.itemsize == 4 || v->buf.itemsize == 8) && strchr("ilq", f[0]) && f[1] == 0)) {
        PyBuffer_Release(&v->buf);
        PyErr_Format(PyExc_ValueError, "row.%s: an int32 or int64 array", attr);
        return -1;
    }
    v->wide = v->buf.itemsize == 8;
    return 0;
}

static inline long long intvec_at(const IntVec *v, Py_ssize_t i) {
    return v->wide ? ((const int64_t *)v->buf.buf)[i] : ((const int32_t *)v->buf.buf)[i];
}

/* zero_half_cuts(x, rows, rhs, activity, thresholds, tol): cuts.zero_half_cuts_py compiled
 * (same cuts, same order; the tests compare them): the rows tight at x (rhs[r] -
 * activity[r] <= tol; rows: Row objects, rhs: their right-hand sides as floats), for each
 * threshold in turn the parity matrix of their odd coefficients on the columns with x
 * above it, the GF(2) combinations of combinations_core, and per combination the
 * Chvatal-Gomory cut floor(sum / 2) when x violates it by more than tol; returns the cuts
 * of the first threshold that gives any, as (cols, coefs, rhs) tuples of lists. */
static PyObject *zero_half_cuts(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_x, *o_rows, *o_rhs, *o_act, *o_th;
    double tol;
    if (!PyArg_ParseTuple(args, "OOOOOd", &o_x, &o_rows, &o_rhs, &o_act, &o_th, &tol)) return NULL;
    Py_buffer bx, brhs, bact;
    PyObject *rows = NULL, *ths = NULL, *out = NULL, *combos = NULL;
    IntVec *cv = NULL, *kv = NULL;
    int *tight = NULL, *pos = NULL;
    long long *trhs = NULL, *alpha = NULL;
    uint8_t *with_frac = NULL, *parity = NULL;
    int got_x = 0, got_rhs = 0, got_act = 0, nt = 0, n_vec = 0;
    if (PyObject_GetBuffer(o_x, &bx, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got_x = 1;
    if (PyObject_GetBuffer(o_rhs, &brhs, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got_rhs = 1;
    if (PyObject_GetBuffer(o_act, &bact, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got_act = 1;
    if (strcmp(bx.format, "d") || strcmp(brhs.format, "d") || strcmp(bact.format, "d")) {
        PyErr_SetString(PyExc_ValueError, "x, rhs, activity: float64 arrays");
        goto done;
    }
    rows = PySequence_Fast(o_rows, "rows: a sequence of Row");
    if (!rows) goto done;
    ths = PySequence_Fast(o_th, "thresholds: a sequence of floats");
    if (!ths) goto done;
    Py_ssize_t n = bx.len / 8, m = PySequence_Fast_GET_SIZE(rows);
    if (brhs.len / 8 != m || bact.len / 8 < m) {
        PyErr_SetString(PyExc_ValueError, "rhs: one per row; activity: at least one per row");
        goto done;
    }
    const double *x = bx.buf, *rhs = brhs.buf, *act = bact.buf;
    out = PyList_New(0);
    tight = malloc((m ? m : 1) * sizeof(int));
    cv = calloc(m ? m : 1, sizeof(IntVec));
    kv = calloc(m ? m : 1, sizeof(IntVec));
    trhs = malloc((m ? m : 1) * sizeof(long long));
    with_frac = calloc(m ? m : 1, 1);
    pos = malloc((n ? n : 1) * sizeof(int));
    alpha = calloc(n ? n : 1, sizeof(long long));
    if (!out || !tight || !cv || !kv || !trhs || !with_frac || !pos || !alpha) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t r = 0; r < m; r++)
        if (rhs[r] - act[r] <= tol) tight[nt++] = (int)r;
    for (int t = 0; t < nt; t++) {
        PyObject *row = PySequence_Fast_GET_ITEM(rows, tight[t]);
        if (intvec_get(row, "cols", &cv[t]) < 0) goto fail;
        if (intvec_get(row, "coefs", &kv[t]) < 0) {
            PyBuffer_Release(&cv[t].buf);
            goto fail;
        }
        n_vec++;
        if (cv[t].buf.len / cv[t].buf.itemsize != kv[t].buf.len / kv[t].buf.itemsize) {
            PyErr_SetString(PyExc_ValueError, "row: cols and coefs differ in length");
            goto fail;
        }
        PyObject *o = PyObject_GetAttrString(row, "rhs");
        if (!o) goto fail;
        trhs[t] = PyLong_AsLongLong(o);
        Py_DECREF(o);
        if (trhs[t] == -1 && PyErr_Occurred()) goto fail;
        Py_ssize_t len = cv[t].buf.len / cv[t].buf.itemsize;
        for (Py_ssize_t e = 0; e < len; e++) {
            long long c = intvec_at(&cv[t], e);
            if (c < 0 || c >= n) {
                PyErr_SetString(PyExc_ValueError, "row: a column out of range");
                goto fail;
            }
            with_frac[t] |= x[c] > tol && x[c] < 1.0 - tol;
        }
    }
    if (nt == 0) goto done;
    Py_ssize_t n_th = PySequence_Fast_GET_SIZE(ths);
    for (Py_ssize_t h = 0; h < n_th; h++) {
        double th = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(ths, h));
        if (th == -1.0 && PyErr_Occurred()) goto fail;
        if (th < tol) th = tol;
        int k = 0;
        for (Py_ssize_t c = 0; c < n; c++) pos[c] = x[c] > th ? k++ : -1;
        int width = k + 1;
        free(parity);
        parity = calloc((size_t)nt * width, 1);
        if (!parity) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int t = 0; t < nt; t++) {
            uint8_t *line = parity + (size_t)t * width;
            Py_ssize_t len = cv[t].buf.len / cv[t].buf.itemsize;
            for (Py_ssize_t e = 0; e < len; e++) {
                int p = pos[intvec_at(&cv[t], e)];
                if (p >= 0 && (intvec_at(&kv[t], e) & 1)) line[p] = 1;
            }
            line[k] = trhs[t] & 1;
        }
        Py_XDECREF(combos);
        combos = combinations_core(parity, with_frac, nt, width);
        if (!combos) goto fail;
        for (Py_ssize_t q = 0; q < PyList_GET_SIZE(combos); q++) {
            PyObject *combo = PyList_GET_ITEM(combos, q);
            long long total = 0;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(combo); i++) {
                int t = (int)PyLong_AsLong(PyList_GET_ITEM(combo, i));
                Py_ssize_t len = cv[t].buf.len / cv[t].buf.itemsize;
                for (Py_ssize_t e = 0; e < len; e++)
                    alpha[intvec_at(&cv[t], e)] += intvec_at(&kv[t], e);
                total += trhs[t];
            }
            PyObject *cols = PyList_New(0), *coefs = PyList_New(0);
            if (!cols || !coefs) {
                Py_XDECREF(cols);
                Py_XDECREF(coefs);
                goto fail;
            }
            double activity = 0.0;
            int bad = 0;
            for (Py_ssize_t c = 0; c < n; c++) {
                long long a = alpha[c];
                alpha[c] = 0;
                if (a / 2 == 0 || bad) continue;
                activity += (double)(a / 2) * x[c];
                PyObject *vc = PyLong_FromSsize_t(c), *vk = PyLong_FromLongLong(a / 2);
                if (!vc || !vk || PyList_Append(cols, vc) < 0 || PyList_Append(coefs, vk) < 0)
                    bad = 1;
                Py_XDECREF(vc);
                Py_XDECREF(vk);
            }
            if (bad) {
                Py_DECREF(cols);
                Py_DECREF(coefs);
                goto fail;
            }
            if (activity > (double)(total / 2) + tol) {
                PyObject *cut = Py_BuildValue("(NNL)", cols, coefs, total / 2);
                if (!cut || PyList_Append(out, cut) < 0) {
                    Py_XDECREF(cut);
                    goto fail;
                }
                Py_DECREF(cut);
            } else {
                Py_DECREF(cols);
                Py_DECREF(coefs);
            }
        }
        if (PyList_GET_SIZE(out) > 0) break;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (int t = 0; t < n_vec; t++) {
        PyBuffer_Release(&cv[t].buf);
        PyBuffer_Release(&kv[t].buf);
    }
    free(cv); free(kv); free(tight); free(pos); free(trhs); free(alpha); free(with_frac);
    free(parity);
    Py_XDECREF(combos);
    Py_XDECREF(rows);
    Py_XDECREF(ths);
    if (got_x) PyBuffer_Release(&bx);
    if (got_rhs) PyBuffer_Release(&brhs);
    if (got_act) PyBuffer_Release(&bact);
    return out;
}

static PyMethodDef methods[] = {
    {"zero_half_combinations", zero_half_combinations, METH_VARARGS,
     "zero_half_combinations(parity: uint8 (rows, k + 1), useful: uint8 (rows,)) -> row lists"},
    {"cliques", cliques, METH_VARARGS,
     "cliques(x: float64 (n,), conflict: uint8 (n, n), limit: int, tol: float) -> column lists"},
    {"zero_half_cuts", zero_half_cuts, METH_VARARGS,
     "zero_half_cuts(x, rows, rhs, activity, thresholds, tol) -> [(cols, coefs, rhs)]"},
    {"solve_mod", solve_mod, METH_VARARGS,
     "solve_mod(system: int64 (equations, unknowns), target: int64, k: prime) -> list | None"},
    {"conflict_fill", conflict_fill, METH_VARARGS,
     "conflict_fill(out: zeroed uint8 (n, n), row_of: int32, col_of: int32) -> None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_separation", "Compiled cores of the cut separation.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__separation(void) { return PyModule_Create(&module); }
