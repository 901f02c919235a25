/* Compiled core of the agent's bid menus (themis.mechanism.bids). Each function returns what
 * its pure-Python reference in bids.py returns - the same bundles in the same order, made
 * of the same Gpu objects, the same bid rows - and the tests compare them.
 *
 * offer(gpus) indexes one offer, once for all the bidders of a round (bids.OfferIndex):
 * the GPUs grouped by machine (machines in order of first appearance), each machine's
 * GPUs in fill order (fullest slots first, then slots by name, GPUs by id:
 * bids._order_machine), machines and racks numbered, each machine's rack (that of its
 * first GPU in fill order), and per GPU its machine, its own rack and its slot as
 * numbers. It returns None when two GPUs share an id (the caller uses the reference).
 * The bundles it hands out are always the offer's own Gpu objects (the reference may
 * hand out equal records of an earlier offer from its fill-order memo, bids._ordered).
 *
 * menu(offer, held, previous, max_new, per_k, ties, salt, tie_of) is
 * bids.candidate_bundles_py: the app's view of the offer (bids._OfferView: GPUs whose lease
 * it just lost first on their machines and their machines first, machine affinity, machines
 * and racks in preference
 * order), then per useful count the aligned machine blocks, the rack fills, else the fill
 * of the whole offer, without repeated GPU sets. Tie hashes come from the ``ties`` dict;
 * names missing from it are filled by calling tie_of(ties, salt, name) (bids._tie_of).
 *
 * bids(offer, held, previous, max_new, per_k, ties, salt, tie_of, remaining, slowdowns,
 * elapsed, t_id, rho_current, bid_type) is the bid loop of bids.make_bid_table_py over
 * that menu: rho of held + bundle at the union's locality, (elapsed + S * remaining(n)) /
 * t_id, where remaining(n) is fairness.RemainingTime(app)(n) evaluated here from its
 * ``parts`` (``remaining``), once per size; bundles that do not beat rho_current or a
 * smaller bundle are dropped; the others become bid_type(sorted ids, rho).
 *
 * Every sort is stable (a merge sort), as Python's sorted is, so equal keys (e.g. equal
 * tie hashes) keep the order the reference keeps. Built with -ffp-contract=off, so that
 * rho is computed with the same two roundings as in Python. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static PyObject *s_id, *s_machine, *s_rack, *s_slot; /* interned attribute names */

/* ------------------------------------------------------------------ helpers */

typedef int (*cmp_fn)(const void *ctx, int a, int b); /* < 0, 0, > 0 */

/* Stable merge sort of a[0..n) under cmp; tmp holds n ints. */
static void stable_sort(int *a, int n, int *tmp, cmp_fn cmp, const void *ctx) {
    if (n < 2) return;
    if (n <= 16) { /* insertion sort: moves an element only past strictly greater ones */
        for (int i = 1; i < n; i++) {
            int x = a[i], j = i;
            while (j > 0 && cmp(ctx, a[j - 1], x) > 0) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
        return;
    }
    int h = n / 2;
    stable_sort(a, h, tmp, cmp, ctx);
    stable_sort(a + h, n - h, tmp, cmp, ctx);
    if (cmp(ctx, a[h - 1], a[h]) <= 0) return; /* already in order (e.g. sorted input) */
    int i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp(ctx, a[j], a[i]) < 0 ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof(int));
}

static int cmp_ll(long long a, long long b) { return a < b ? -1 : a > b; }

/* Equality of two str objects (without the dict machinery). */
static int same_str(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    Py_ssize_t len = PyUnicode_GET_LENGTH(a);
    return len == PyUnicode_GET_LENGTH(b) && PyUnicode_KIND(a) == PyUnicode_KIND(b) &&
           memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)len * PyUnicode_KIND(a)) == 0;
}

/* The order of two str objects, as Python's < (by code point): memcmp when both are
 * one byte per character, else PyUnicode_Compare. */
static int cmp_str(PyObject *a, PyObject *b) {
    if (a == b) return 0;
    if (PyUnicode_KIND(a) != PyUnicode_1BYTE_KIND || PyUnicode_KIND(b) != PyUnicode_1BYTE_KIND)
        return PyUnicode_Compare(a, b);
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
    int r = memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)(la < lb ? la : lb));
    return r ? r : (la > lb) - (la < lb);
}

/* A growable int array. */
typedef struct {
    int *v;
    Py_ssize_t len, cap;
} IVec;

static int ivec_push(IVec *x, int value) {
    if (x->len == x->cap) {
        Py_ssize_t cap = x->cap ? 2 * x->cap : 64;
        int *v = realloc(x->v, (size_t)cap * sizeof(int));
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        x->v = v;
        x->cap = cap;
    }
    x->v[x->len++] = value;
    return 0;
}

/* The number a dict maps ``key`` to; -1 when absent, -2 on error (unhashable key). */
static int lookup(PyObject *dict, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(dict, key);
    if (!v) return PyErr_Occurred() ? -2 : -1;
    return (int)PyLong_AsLong(v);
}

/* ------------------------------------------------------------------ the offer index */

typedef struct {
    PyObject_HEAD
    int n, n_mach, n_rack_of, n_rack;
    PyObject *flat;       /* tuple: the GPUs in fill order, machine by machine */
    PyObject *ids;        /* tuple: their ids */
    PyObject *slots;      /* tuple: their slot names */
    PyObject *mach_names; /* tuple: machine names by number */
    PyObject *rack_names; /* tuple: rack names by number (the machines' racks first) */
    PyObject *mach_ids;   /* dict: machine name -> number */
    PyObject *rack_ids;   /* dict: rack name -> number */
    int *g_mach, *g_rack, *g_slot; /* per flat position: machine, own rack, slot number */
    int *m_start; /* per machine: its first flat position (n_mach + 1 entries) */
    int *m_rack;  /* per machine: its rack (the rack of its first GPU in fill order) */
    int *r_start, *r_mach; /* per machine rack: its machines, ascending (like m_start) */
    int *r_free;  /* per machine rack: its GPUs */
    int *by_id;   /* flat positions by GPU id (for previous ids and sorted bid ids) */
    int *rank;    /* per flat position: its place in by_id */
    int *buf;     /* the int arrays above */
} Offer;

static void offer_dealloc(Offer *o) {
    Py_XDECREF(o->flat);
    Py_XDECREF(o->ids);
    Py_XDECREF(o->slots);
    Py_XDECREF(o->mach_names);
    Py_XDECREF(o->rack_names);
    Py_XDECREF(o->mach_ids);
    Py_XDECREF(o->rack_ids);
    free(o->buf);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *offer_size(Offer *o, void *closure) {
    (void)closure;
    return PyLong_FromLong(o->n);
}

static PyGetSetDef offer_getset[] = {
    {"size", (getter)offer_size, NULL, "number of offered GPUs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject OfferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "themis.mechanism._menu.Offer",
    .tp_basicsize = sizeof(Offer),
    .tp_dealloc = (destructor)offer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An offer indexed for menu construction (made by offer()).",
    .tp_getset = offer_getset,
};

/* Fill order inside a machine: larger slots first, then slot name, then GPU id. The
 * GPU's fields are f[4 i + (0 id, 1 machine, 2 rack, 3 slot)]. It is sorted by (slot, id),
 * then stably by slot size. */
typedef struct {
    const int *slot_size;
    PyObject *const *f;
} FillOrder;

static int cmp_slot_id(const void *c, int a, int b) {
    PyObject *const *f = ((const FillOrder *)c)->f;
    int r = cmp_str(f[4 * a + 3], f[4 * b + 3]);
    return r ? r : cmp_str(f[4 * a], f[4 * b]);
}

static int cmp_slot_size(const void *c, int a, int b) {
    const int *size = ((const FillOrder *)c)->slot_size;
    return size[b] - size[a];
}

static int cmp_id(const void *c, int a, int b) {
    PyObject *ids = (PyObject *)c;
    return cmp_str(PyTuple_GET_ITEM(ids, a), PyTuple_GET_ITEM(ids, b));
}

/* The number ``key`` has in ``dict``, numbering it next (and appending it to ``names``
 * unless NULL) when new; -1 on error. */
static int number(PyObject *dict, PyObject *names, PyObject *key, int *next) {
    int got = lookup(dict, key);
    if (got != -1) return got < 0 ? -1 : got;
    PyObject *v = PyLong_FromLong(*next);
    if (!v) return -1;
    int bad = PyDict_SetItem(dict, key, v) < 0 || (names && PyList_Append(names, key) < 0);
    Py_DECREF(v);
    return bad ? -1 : (*next)++;
}

static PyObject *py_offer(PyObject *self, PyObject *arg) {
    (void)self;
    PyObject *gpus = PySequence_Tuple(arg);
    if (!gpus) return NULL;
    Py_ssize_t size = PyTuple_GET_SIZE(gpus);
    if (size > INT_MAX / 8) {
        Py_DECREF(gpus);
        PyErr_SetString(PyExc_ValueError, "offer: too many GPUs");
        return NULL;
    }
    int n = (int)size;
    PyObject *result = NULL, *mnames = NULL, *rnames = NULL;
    PyObject **f = calloc(4 * (size_t)n + 1, sizeof(PyObject *));
    /* per offer position: machine, slot number, slot size; counts (per machine, per
     * rack); the offer positions in fill order; sort scratch */
    int *t = malloc((6 * (size_t)n + 2) * sizeof(int));
    Offer *o = (Offer *)OfferType.tp_alloc(&OfferType, 0);
    if (!o) goto done;
    if (!f || !t) {
        PyErr_NoMemory();
        goto done;
    }
    int *mach_of = t, *slot_num = t + n, *slot_size = t + 2 * n, *count = t + 3 * n,
        *order = t + 4 * n + 1, *tmp = t + 5 * n + 1;
    o->n = n;
    if (!(o->mach_ids = PyDict_New()) || !(o->rack_ids = PyDict_New()) ||
        !(mnames = PyList_New(0)) || !(rnames = PyList_New(0)))
        goto done;

    /* the fields of every GPU */
    PyObject *attrs[4] = {s_id, s_machine, s_rack, s_slot};
    for (int i = 0; i < n; i++) {
        PyObject *g = PyTuple_GET_ITEM(gpus, i);
        for (int a = 0; a < 4; a++) {
            PyObject *v = f[4 * i + a] = PyObject_GetAttr(g, attrs[a]);
            if (!v) goto done;
            if (!PyUnicode_Check(v)) {
                PyErr_Format(PyExc_TypeError, "offer[%d].%U must be a str, not %.100s", i,
                             attrs[a], Py_TYPE(v)->tp_name);
                goto done;
            }
        }
    }
    /* machines, numbered in order of first appearance, and the GPUs grouped by machine
     * (offer order within a machine) */
    int n_mach = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && same_str(f[4 * i + 1], f[4 * (i - 1) + 1]))
            mach_of[i] = mach_of[i - 1];
        else if ((mach_of[i] = number(o->mach_ids, mnames, f[4 * i + 1], &n_mach)) < 0)
            goto done;
    }
    o->n_mach = n_mach;
    o->buf = malloc((5 * (size_t)n + 5 * (size_t)n_mach + 2) * sizeof(int));
    if (!o->buf) {
        PyErr_NoMemory();
        goto done;
    }
    o->g_mach = o->buf;
    o->g_rack = o->g_mach + n;
    o->g_slot = o->g_rack + n;
    o->m_start = o->g_slot + n;
    o->m_rack = o->m_start + n_mach + 1;
    o->r_start = o->m_rack + n_mach;
    o->r_mach = o->r_start + n_mach + 1;
    o->r_free = o->r_mach + n_mach;
    o->by_id = o->r_free + n_mach;
    o->rank = o->by_id + n;
    memset(o->m_start, 0, (size_t)(n_mach + 1) * sizeof(int));
    for (int i = 0; i < n; i++) o->m_start[mach_of[i] + 1]++;
    for (int m = 0; m < n_mach; m++) o->m_start[m + 1] += o->m_start[m];
    memcpy(count, o->m_start, (size_t)n_mach * sizeof(int));
    for (int i = 0; i < n; i++) order[count[mach_of[i]]++] = i;

    /* each machine in fill order; slots (runs of one slot name once sorted by slot) are
     * numbered per machine */
    int n_slot = 0;
    FillOrder fill = {slot_size, f};
    for (int m = 0; m < n_mach; m++) {
        int s = o->m_start[m], e = o->m_start[m + 1], uneven = 0;
        stable_sort(order + s, e - s, tmp, cmp_slot_id, &fill);
        for (int p = s, run = s; p < e; p = run) {
            while (run < e && same_str(f[4 * order[run] + 3], f[4 * order[p] + 3])) run++;
            for (int q = p; q < run; q++) {
                slot_num[order[q]] = n_slot;
                slot_size[order[q]] = run - p;
            }
            uneven |= p > s && slot_size[order[p]] != slot_size[order[s]];
            n_slot++;
        }
        if (uneven) stable_sort(order + s, e - s, tmp, cmp_slot_size, &fill);
    }

    /* racks: the machines' racks first (in machine order), then the GPUs' own racks */
    int n_rack = 0;
    for (int m = 0; m < n_mach; m++)
        if ((o->m_rack[m] = number(o->rack_ids, rnames, f[4 * order[o->m_start[m]] + 2],
                                   &n_rack)) < 0)
            goto done;
    o->n_rack_of = n_rack;
    for (int p = 0; p < n; p++) {
        int i = order[p], m = mach_of[i];
        o->g_mach[p] = m;
        o->g_slot[p] = slot_num[i];
        if (same_str(f[4 * i + 2], f[4 * order[o->m_start[m]] + 2]))
            o->g_rack[p] = o->m_rack[m]; /* the machine's rack */
        else if ((o->g_rack[p] = number(o->rack_ids, rnames, f[4 * i + 2], &n_rack)) < 0)
            goto done;
    }
    o->n_rack = n_rack;
    /* per machine rack: its machines (ascending) and its GPUs */
    int n_rack_of = o->n_rack_of;
    memset(o->r_start, 0, (size_t)(n_rack_of + 1) * sizeof(int));
    memset(o->r_free, 0, (size_t)n_rack_of * sizeof(int));
    for (int m = 0; m < n_mach; m++) {
        o->r_start[o->m_rack[m] + 1]++;
        o->r_free[o->m_rack[m]] += o->m_start[m + 1] - o->m_start[m];
    }
    for (int r = 0; r < n_rack_of; r++) o->r_start[r + 1] += o->r_start[r];
    memcpy(count, o->r_start, (size_t)n_rack_of * sizeof(int));
    for (int m = 0; m < n_mach; m++) o->r_mach[count[o->m_rack[m]]++] = m;

    /* the GPUs in fill order, their ids and slot names */
    if (!(o->flat = PyTuple_New(n)) || !(o->ids = PyTuple_New(n)) || !(o->slots = PyTuple_New(n)))
        goto done;
    for (int p = 0; p < n; p++) {
        int i = order[p];
        PyObject *g = PyTuple_GET_ITEM(gpus, i);
        Py_INCREF(g);
        PyTuple_SET_ITEM(o->flat, p, g);
        Py_INCREF(f[4 * i]);
        PyTuple_SET_ITEM(o->ids, p, f[4 * i]);
        Py_INCREF(f[4 * i + 3]);
        PyTuple_SET_ITEM(o->slots, p, f[4 * i + 3]);
    }
    /* the positions by id, each position's rank */
    for (int p = 0; p < n; p++) o->by_id[p] = p;
    stable_sort(o->by_id, n, tmp, cmp_id, o->ids);
    for (int r = 0; r < n; r++) {
        o->rank[o->by_id[r]] = r;
        if (r > 0 && cmp_id(o->ids, o->by_id[r - 1], o->by_id[r]) == 0) { /* a shared id */
            Py_INCREF(Py_None);
            result = Py_None;
            goto done;
        }
    }
    if (!(o->mach_names = PyList_AsTuple(mnames)) || !(o->rack_names = PyList_AsTuple(rnames)))
        goto done;
    result = (PyObject *)o;
    o = NULL;
done:
    if (f)
        for (Py_ssize_t i = 0; i < 4 * (Py_ssize_t)n; i++) Py_XDECREF(f[i]);
    free(f);
    free(t);
    Py_XDECREF(o);
    Py_XDECREF(mnames);
    Py_XDECREF(rnames);
    Py_DECREF(gpus);
    return result;
}

/* The flat position of the GPU with id ``gid`` (binary search in by_id); -1 when none,
 * -2 (TypeError) when gid is not a str. */
static int position_of(const Offer *o, PyObject *gid) {
    if (!PyUnicode_Check(gid)) {
        PyErr_Format(PyExc_TypeError, "previous: GPU ids must be str, not %.100s",
                     Py_TYPE(gid)->tp_name);
        return -2;
    }
    int lo = 0, hi = o->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = cmp_str(PyTuple_GET_ITEM(o->ids, o->by_id[mid]), gid);
        if (c == 0) return o->by_id[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* ------------------------------------------------------------------ an app's view */

enum { LOC_RACK, LOC_MACHINE, LOC_SLOT }; /* the levels of View.h_n and View.h_id */

typedef struct {
    Offer *o;
    PyObject *ties, *salt, *tie_of; /* borrowed */
    int per_k;
    int *perm;        /* flat positions in the app's fill order (previous GPUs first) */
    int *aff;         /* per machine: 0 the app holds GPUs there, 1 in its rack, else 2 */
    long long *tie;   /* per machine: its tie hash */
    int *morder;      /* machines in preference order */
    int racks_ready, whole_ready;
    int *tight, *small; /* per rack (layout of Offer.r_mach): its machines largest first /
                           smallest first, preferred ones first */
    int *r_aff;       /* per rack: the best affinity of its machines */
    long long *r_tie; /* per rack: its tie hash */
    int *r_order, *r_whole; /* racks in preference order: for rack fills, for the whole offer */
    int *tmp;         /* n + n_mach ints of scratch */
    int *stamp, stamp_now; /* per flat position: the last candidate naming it (dedupe) */
    /* the held GPUs per level (rack, machine, slot): how many distinct ones (0, 1, 2 =
     * several) and the number of the only one (-1: none offered) */
    int h_n[3], h_id[3];
    int n_held;
    int *ints;
    long long *longs;
    char *marks; /* previous GPUs (n), their slots (n), held machines (n_mach), racks (n_rack) */
} View;

static void view_free(View *v) {
    free(v->ints);
    free(v->longs);
    free(v->marks);
}

/* The tie hash of a machine or rack name: from the ties dict, else tie_of(ties, salt, name). */
static int tie_value(View *v, PyObject *name, long long *out) {
    PyObject *t = PyDict_GetItemWithError(v->ties, name);
    if (t)
        Py_INCREF(t);
    else if (PyErr_Occurred() ||
             !(t = PyObject_CallFunctionObjArgs(v->tie_of, v->ties, v->salt, name, NULL)))
        return -1;
    *out = PyLong_AsLongLong(t);
    Py_DECREF(t);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int m_len(const Offer *o, int m) { return o->m_start[m + 1] - o->m_start[m]; }

static int cmp_machine(const void *c, int a, int b) { /* (affinity, size, tie) */
    const View *v = c;
    if (v->aff[a] != v->aff[b]) return v->aff[a] - v->aff[b];
    if (m_len(v->o, a) != m_len(v->o, b)) return m_len(v->o, a) - m_len(v->o, b);
    return cmp_ll(v->tie[a], v->tie[b]);
}

static int cmp_tight(const void *c, int a, int b) { /* (affinity, -size, tie) */
    const View *v = c;
    if (v->aff[a] != v->aff[b]) return v->aff[a] - v->aff[b];
    if (m_len(v->o, a) != m_len(v->o, b)) return m_len(v->o, b) - m_len(v->o, a);
    return cmp_ll(v->tie[a], v->tie[b]);
}

static int cmp_small(const void *c, int a, int b) { /* (affinity, size) */
    const View *v = c;
    if (v->aff[a] != v->aff[b]) return v->aff[a] - v->aff[b];
    return m_len(v->o, a) - m_len(v->o, b);
}

static int cmp_rack(const void *c, int a, int b) { /* (affinity, free, tie) */
    const View *v = c;
    if (v->r_aff[a] != v->r_aff[b]) return v->r_aff[a] - v->r_aff[b];
    if (v->o->r_free[a] != v->o->r_free[b]) return v->o->r_free[a] - v->o->r_free[b];
    return cmp_ll(v->r_tie[a], v->r_tie[b]);
}

static int cmp_rack_whole(const void *c, int a, int b) { /* (affinity, -free, tie) */
    const View *v = c;
    if (v->r_aff[a] != v->r_aff[b]) return v->r_aff[a] - v->r_aff[b];
    if (v->o->r_free[a] != v->o->r_free[b]) return v->o->r_free[b] - v->o->r_free[a];
    return cmp_ll(v->r_tie[a], v->r_tie[b]);
}

/* 0 when n == 0, 1 when vals[0..n) are all equal, 2 otherwise; -1 on error. */
static int distinct(PyObject *const *vals, Py_ssize_t n, Py_ssize_t stride) {
    if (n == 0) return 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        int eq = PyObject_RichCompareBool(vals[i * stride], vals[0], Py_EQ);
        if (eq <= 0) return eq < 0 ? -1 : 2;
    }
    return 1;
}

/* The held GPUs (never offered): their machines and racks marked for the affinity, and
 * the locality summary v->h_n / v->h_id (the sets held_racks, held_machines, held_slots
 * of bids.make_bid_table_py). */
static int view_held(View *v, PyObject *held, char *held_m, char *held_r) {
    Offer *o = v->o;
    PyObject *seq = PySequence_Tuple(held);
    if (!seq) return -1;
    Py_ssize_t nh = PyTuple_GET_SIZE(seq);
    if (nh > INT_MAX / 4) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "held: too many GPUs");
        return -1;
    }
    int ok = 0;
    v->n_held = (int)nh;
    /* f[3 i + (0 machine, 1 rack, 2 slot)]: the fields of held GPU i */
    PyObject **f = calloc(3 * (size_t)nh + 1, sizeof(PyObject *));
    if (!f) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *attrs[3] = {s_machine, s_rack, s_slot};
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *g = PyTuple_GET_ITEM(seq, i);
        for (int a = 0; a < 3; a++)
            if (!(f[3 * i + a] = PyObject_GetAttr(g, attrs[a]))) goto done;
        int m = lookup(o->mach_ids, f[3 * i]), r = lookup(o->rack_ids, f[3 * i + 1]);
        if (m == -2 || r == -2) goto done;
        if (m >= 0) held_m[m] = 1;
        if (r >= 0) held_r[r] = 1;
    }
    if ((v->h_n[LOC_MACHINE] = distinct(f, nh, 3)) < 0 ||
        (v->h_n[LOC_RACK] = distinct(f + 1, nh, 3)) < 0)
        goto done;
    /* slots are (machine, slot) pairs: on one machine they differ iff the names do */
    v->h_n[LOC_SLOT] = v->h_n[LOC_MACHINE];
    if (v->h_n[LOC_SLOT] == 1 && (v->h_n[LOC_SLOT] = distinct(f + 2, nh, 3)) < 0) goto done;
    v->h_id[LOC_RACK] = v->h_id[LOC_MACHINE] = v->h_id[LOC_SLOT] = -1;
    if (v->h_n[LOC_RACK] == 1 && (v->h_id[LOC_RACK] = lookup(o->rack_ids, f[1])) == -2)
        goto done;
    if (v->h_n[LOC_MACHINE] == 1) {
        int m = v->h_id[LOC_MACHINE] = lookup(o->mach_ids, f[0]);
        if (m == -2) goto done;
        if (m >= 0 && v->h_n[LOC_SLOT] == 1) /* the offered GPUs in that slot, if any */
            for (int p = o->m_start[m]; p < o->m_start[m + 1]; p++) {
                int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(o->slots, p), f[2], Py_EQ);
                if (eq < 0) goto done;
                if (eq) {
                    v->h_id[LOC_SLOT] = o->g_slot[p];
                    break;
                }
            }
    }
    ok = 1;
done:
    if (f)
        for (Py_ssize_t i = 0; i < 3 * nh; i++) Py_XDECREF(f[i]);
    free(f);
    Py_DECREF(seq);
    return ok ? 0 : -1;
}

/* bids._OfferView.__init__: the app's fill order, the machines' affinity, tie hashes and
 * preference order. */
static int view_init(View *v, Offer *o, PyObject *held, PyObject *previous, PyObject *ties,
                     PyObject *salt, PyObject *tie_of, Py_ssize_t per_k) {
    int n = o->n, nm = o->n_mach, nr = o->n_rack_of;
    v->o = o;
    v->ties = ties;
    v->salt = salt;
    v->tie_of = tie_of;
    v->per_k = per_k > n + 1 ? n + 1 : (int)per_k; /* a limit above n limits nothing */
    v->ints = malloc((4 * (size_t)n + 5 * (size_t)nm + 4 * (size_t)nr + 1) * sizeof(int));
    v->longs = malloc(((size_t)nm + (size_t)nr + 1) * sizeof(long long));
    v->marks = calloc(2 * (size_t)n + 2 * (size_t)nm + (size_t)o->n_rack + 1, 1);
    if (!v->ints || !v->longs || !v->marks) {
        PyErr_NoMemory();
        return -1;
    }
    v->perm = v->ints;
    v->stamp = v->perm + n;
    v->tmp = v->stamp + n; /* n + nm */
    v->aff = v->tmp + n + nm;
    v->morder = v->aff + nm;
    v->tight = v->morder + nm;
    v->small = v->tight + nm;
    v->r_aff = v->small + nm;
    v->r_order = v->r_aff + nr;
    v->r_whole = v->r_order + nr;
    v->tie = v->longs;
    v->r_tie = v->tie + nm;
    char *prev = v->marks, *prev_slot = prev + n, *held_m = prev_slot + n, *held_r = held_m + nm;
    char *prev_m = held_r + o->n_rack;
    memset(v->stamp, 0, (size_t)n * sizeof(int));

    if (view_held(v, held, held_m, held_r) < 0) return -1;

    /* previous: the offered GPUs among them, their slots; their machines come first, before
     * the held ones, and their racks count as held */
    PyObject *it = PyObject_GetIter(previous), *gid;
    if (!it) return -1;
    int any = 0;
    while ((gid = PyIter_Next(it))) {
        int p = position_of(o, gid);
        Py_DECREF(gid);
        if (p == -2) break;
        if (p >= 0) {
            prev[p] = prev_slot[o->g_slot[p]] = prev_m[o->g_mach[p]] = 1;
            held_r[o->m_rack[o->g_mach[p]]] = 1;
            any = 1;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return -1;
    for (int p = 0; p < n; p++) v->perm[p] = p;
    /* on a machine with previous GPUs: the previous slots first, previous GPUs first in
     * them, otherwise the usual fill order (a stable sort on two flags) */
    for (int m = 0; any && m < nm; m++) {
        int s = o->m_start[m], e = o->m_start[m + 1], k = 0, has = 0;
        for (int p = s; p < e; p++) has |= prev[p];
        if (!has) continue;
        for (int p = s; p < e; p++)
            if (prev_slot[o->g_slot[p]] && prev[p]) v->tmp[k++] = p;
        for (int p = s; p < e; p++)
            if (prev_slot[o->g_slot[p]] && !prev[p]) v->tmp[k++] = p;
        for (int p = s; p < e; p++)
            if (!prev_slot[o->g_slot[p]]) v->tmp[k++] = p;
        memcpy(v->perm + s, v->tmp, (size_t)(e - s) * sizeof(int));
    }
    for (int m = 0; m < nm; m++) {
        v->aff[m] = prev_m[m] ? 0 : held_m[m] ? 1 : held_r[o->m_rack[m]] ? 2 : 3;
        if (tie_value(v, PyTuple_GET_ITEM(o->mach_names, m), &v->tie[m]) < 0) return -1;
        v->morder[m] = m;
    }
    stable_sort(v->morder, nm, v->tmp, cmp_machine, v);
    return 0;
}

/* bids._OfferView._rack_orders: per rack its machines largest first and smallest first
 * (both preferred ones first), and the racks in preference order. */
static int view_racks(View *v) {
    if (v->racks_ready) return 0;
    Offer *o = v->o;
    for (int r = 0; r < o->n_rack_of; r++) {
        int s = o->r_start[r], len = o->r_start[r + 1] - s;
        memcpy(v->tight + s, o->r_mach + s, (size_t)len * sizeof(int));
        stable_sort(v->tight + s, len, v->tmp, cmp_tight, v);
        memcpy(v->small + s, v->tight + s, (size_t)len * sizeof(int));
        stable_sort(v->small + s, len, v->tmp, cmp_small, v);
        v->r_aff[r] = 3;
        for (int i = s; i < s + len; i++)
            if (v->aff[v->tight[i]] < v->r_aff[r]) v->r_aff[r] = v->aff[v->tight[i]];
        if (tie_value(v, PyTuple_GET_ITEM(o->rack_names, r), &v->r_tie[r]) < 0) return -1;
        v->r_order[r] = r;
    }
    stable_sort(v->r_order, o->n_rack_of, v->tmp, cmp_rack, v);
    v->racks_ready = 1;
    return 0;
}

/* Appends up to ``need`` GPUs of ``machines`` (each in the app's fill order) to out;
 * returns how many, or -1 on error (bids._OfferView._fill). */
static int fill(View *v, const int *machines, int n_machines, int need, IVec *out) {
    int got = 0;
    for (int i = 0; i < n_machines && got < need; i++) {
        int s = v->o->m_start[machines[i]], len = m_len(v->o, machines[i]);
        int take = need - got < len ? need - got : len;
        for (int j = 0; j < take; j++)
            if (ivec_push(out, v->perm[s + j]) < 0) return -1;
        got += take;
    }
    return got;
}

/* The menu of bids.candidate_bundles_py: bundle b is pos->v[start->v[b] .. start->v[b + 1])
 * (flat positions); start gets one entry per bundle, then the end. */
static int build_menu(View *v, Py_ssize_t max_new, IVec *pos, IVec *start) {
    Offer *o = v->o;
    int limit = max_new < o->n ? (int)max_new : o->n, per_k = v->per_k;
    IVec cand = {NULL, 0, 0}, cstart = {NULL, 0, 0}; /* the options for one count */
    int ok = 0;
    for (int k = 1; k <= limit; k++) {
        if (!(k <= 8 || k % 8 == 0 || k == limit)) continue; /* bids.useful_counts */
        cand.len = cstart.len = 0;
        /* single_machine: the aligned blocks of k of the machines in preference order */
        for (int i = 0; i < o->n_mach && cstart.len < per_k; i++) {
            int m = v->morder[i], s = o->m_start[m], len = m_len(o, m);
            for (int b = 0; b + k <= len && cstart.len < per_k; b += k) {
                if (ivec_push(&cstart, (int)cand.len) < 0) goto done;
                for (int j = 0; j < k; j++)
                    if (ivec_push(&cand, v->perm[s + b + j]) < 0) goto done;
            }
        }
        /* single_rack, when short of options: per rack with room, a tight fill and a fill
         * from the smallest machines, up to 2 per_k of them */
        if (cstart.len < per_k) {
            if (view_racks(v) < 0) goto done;
            Py_ssize_t before = cstart.len, lim = 2 * (Py_ssize_t)per_k;
            for (int i = 0; i < o->n_rack_of; i++) {
                int r = v->r_order[i], s = o->r_start[r], len = o->r_start[r + 1] - s;
                if (o->r_free[r] < k) continue;
                if (ivec_push(&cstart, (int)cand.len) < 0 ||
                    fill(v, v->tight + s, len, k, &cand) < 0 ||
                    ivec_push(&cstart, (int)cand.len) < 0 ||
                    fill(v, v->small + s, len, k, &cand) < 0)
                    goto done;
                if (cstart.len - before >= lim) break;
            }
            if (cstart.len - before > lim) { /* out[:limit] */
                cstart.len = before + lim;
                cand.len = cstart.v[cstart.len];
            }
        }
        /* whole_offer, when there is no option: racks preferred first, then the largest */
        if (cstart.len == 0) {
            if (view_racks(v) < 0) goto done;
            if (!v->whole_ready) {
                for (int r = 0; r < o->n_rack_of; r++) v->r_whole[r] = r;
                stable_sort(v->r_whole, o->n_rack_of, v->tmp, cmp_rack_whole, v);
                v->whole_ready = 1;
            }
            if (ivec_push(&cstart, 0) < 0) goto done;
            for (int i = 0, got = 0; i < o->n_rack_of && got < k; i++) {
                int r = v->r_whole[i], s = o->r_start[r];
                int add = fill(v, v->tight + s, o->r_start[r + 1] - s, k - got, &cand);
                if (add < 0) goto done;
                got += add;
            }
        }
        /* the options of exactly k GPUs whose set is not in the menu yet (only bundles of
         * this count can have the same set) */
        if (ivec_push(&cstart, (int)cand.len) < 0) goto done;
        Py_ssize_t first_of_k = start->len;
        for (Py_ssize_t c = 0; c + 1 < cstart.len; c++) {
            const int *b = cand.v + cstart.v[c];
            if (cstart.v[c + 1] - cstart.v[c] != k) continue;
            int now = ++v->stamp_now, seen = 0;
            for (int j = 0; j < k; j++) v->stamp[b[j]] = now;
            for (Py_ssize_t d = first_of_k; d < start->len && !seen; d++) {
                const int *kept = pos->v + start->v[d];
                int same = 1;
                for (int j = 0; j < k && same; j++) same = v->stamp[kept[j]] == now;
                seen = same;
            }
            if (seen) continue;
            if (ivec_push(start, (int)pos->len) < 0) goto done;
            for (int j = 0; j < k; j++)
                if (ivec_push(pos, b[j]) < 0) goto done;
        }
    }
    if (ivec_push(start, (int)pos->len) < 0) goto done;
    ok = 1;
done:
    free(cand.v);
    free(cstart.v);
    return ok ? 0 : -1;
}

/* Checks the arguments, builds the app's view and its menu. */
static int make_menu(View *v, IVec *pos, IVec *start, PyObject *offer, PyObject *held,
                     PyObject *previous, Py_ssize_t max_new, Py_ssize_t per_k, PyObject *ties,
                     PyObject *salt, PyObject *tie_of) {
    if (per_k < 1) {
        PyErr_SetString(PyExc_ValueError, "per_k must be >= 1");
        return -1;
    }
    if (!PyCallable_Check(tie_of)) {
        PyErr_SetString(PyExc_TypeError, "tie_of must be callable");
        return -1;
    }
    if (view_init(v, (Offer *)offer, held, previous, ties, salt, tie_of, per_k) < 0) return -1;
    return build_menu(v, max_new, pos, start);
}

/* ------------------------------------------------------------------ module functions */

static PyObject *py_menu(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *offer, *held, *previous, *ties, *salt, *tie_of, *out = NULL;
    Py_ssize_t max_new, per_k;
    if (!PyArg_ParseTuple(args, "O!OOnnO!UO:menu", &OfferType, &offer, &held, &previous,
                          &max_new, &per_k, &PyDict_Type, &ties, &salt, &tie_of))
        return NULL;
    View v;
    IVec pos = {NULL, 0, 0}, start = {NULL, 0, 0};
    memset(&v, 0, sizeof(v));
    if (make_menu(&v, &pos, &start, offer, held, previous, max_new, per_k, ties, salt, tie_of) < 0)
        goto done;
    Py_ssize_t n_bundles = start.len - 1;
    if (!(out = PyList_New(n_bundles))) goto done;
    for (Py_ssize_t b = 0; b < n_bundles; b++) {
        Py_ssize_t s = start.v[b], len = start.v[b + 1] - s;
        PyObject *bundle = PyList_New(len);
        if (!bundle) {
            Py_CLEAR(out);
            goto done;
        }
        for (Py_ssize_t j = 0; j < len; j++) {
            PyObject *g = PyTuple_GET_ITEM(v.o->flat, pos.v[s + j]);
            Py_INCREF(g);
            PyList_SET_ITEM(bundle, j, g);
        }
        PyList_SET_ITEM(out, b, bundle);
    }
done:
    view_free(&v);
    free(pos.v);
    free(start.v);
    return out;
}

/* Whether held + bundle spans several values of one level: several racks, machines or
 * slots; ``of`` gives the level's number per flat position. */
static int several(int h_n, int h_id, const int *of, const int *b, int k) {
    if (h_n == 2) return 1;
    if (k == 0) return 0;
    int first = h_n == 1 ? h_id : of[b[0]];
    if (first < 0) return 1; /* a held one that is not offered, and an offered one */
    for (int j = 0; j < k; j++)
        if (of[b[j]] != first) return 1;
    return 0;
}

/* The Locality of held + bundle: 3 cluster, 2 rack, 1 machine, 0 slot. */
static int locality(const View *v, const int *b, int k) {
    const Offer *o = v->o;
    if (several(v->h_n[LOC_RACK], v->h_id[LOC_RACK], o->g_rack, b, k)) return 3;
    if (several(v->h_n[LOC_MACHINE], v->h_id[LOC_MACHINE], o->g_mach, b, k)) return 2;
    if (several(v->h_n[LOC_SLOT], v->h_id[LOC_SLOT], o->g_slot, b, k)) return 1;
    return 0;
}

/* fairness.RemainingTime: the current phase's total work, (cap, largest work) per job
 * cap, and per future phase (total work, one job's work, cap). */
typedef struct {
    double total;
    Py_ssize_t n_longest, n_future;
    long long *cap, *f_cap;
    double *work, *f_total, *f_work;
    void *mem;
} Remaining;

/* Reads RemainingTime.parts; -1 (an exception set) when malformed. */
static int remaining_parse(Remaining *r, PyObject *parts) {
    PyObject *longest = NULL, *future = NULL, *item = NULL;
    int ok = 0;
    memset(r, 0, sizeof(*r));
    if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) != 3) {
        PyErr_SetString(PyExc_TypeError, "remaining: RemainingTime.parts, a 3-tuple");
        return -1;
    }
    if ((r->total = PyFloat_AsDouble(PyTuple_GET_ITEM(parts, 0))) == -1.0 && PyErr_Occurred())
        return -1;
    if (!(longest = PySequence_Tuple(PyTuple_GET_ITEM(parts, 1))) ||
        !(future = PySequence_Tuple(PyTuple_GET_ITEM(parts, 2))))
        goto done;
    r->n_longest = PyTuple_GET_SIZE(longest);
    r->n_future = PyTuple_GET_SIZE(future);
    size_t slots = 2 * (size_t)r->n_longest + 3 * (size_t)r->n_future + 1;
    if (!(r->mem = malloc(slots * 8))) {
        PyErr_NoMemory();
        goto done;
    }
    r->cap = r->mem;
    r->f_cap = r->cap + r->n_longest;
    r->work = (double *)(r->f_cap + r->n_future);
    r->f_total = r->work + r->n_longest;
    r->f_work = r->f_total + r->n_future;
    for (Py_ssize_t i = 0; i < r->n_longest; i++) {
        if (!(item = PySequence_Tuple(PyTuple_GET_ITEM(longest, i)))) goto done;
        if (PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "remaining: (cap, work) pairs");
            goto done;
        }
        r->cap[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        if (PyErr_Occurred()) goto done;
        r->work[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred()) goto done;
        Py_CLEAR(item);
    }
    for (Py_ssize_t i = 0; i < r->n_future; i++) {
        if (!(item = PySequence_Tuple(PyTuple_GET_ITEM(future, i)))) goto done;
        if (PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "remaining: (total, work, cap) per future phase");
            goto done;
        }
        r->f_total[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 0));
        if (PyErr_Occurred()) goto done;
        r->f_work[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred()) goto done;
        r->f_cap[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
        if (PyErr_Occurred()) goto done;
        Py_CLEAR(item);
    }
    ok = 1;
done:
    Py_XDECREF(item);
    Py_XDECREF(longest);
    Py_XDECREF(future);
    return ok ? 0 : -1;
}

static int zero_division(void) {
    PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
    return -1;
}

/* RemainingTime.__call__(gpus) (slowdown 1): the same operations in the same order;
 * max(a, b) is Python's (b only if b > a). */
static int remaining_time(const Remaining *r, long long gpus, double *out) {
    double current;
    if (r->total == 0)
        current = 0.0;
    else if (gpus <= 0)
        current = INFINITY;
    else {
        current = r->total / (double)gpus;
        for (Py_ssize_t i = 0; i < r->n_longest; i++) {
            long long m = r->cap[i] < gpus ? r->cap[i] : gpus;
            if (m == 0) return zero_division();
            double x = r->work[i] / (double)m;
            if (x > current) current = x;
        }
    }
    if (r->n_future == 0) {
        *out = current;
        return 0;
    }
    double future = 0.0;
    for (Py_ssize_t i = 0; i < r->n_future; i++) {
        if (r->f_total[i] == 0) continue;
        if (gpus <= 0) {
            future += INFINITY;
            continue;
        }
        long long m = r->f_cap[i] < gpus ? r->f_cap[i] : gpus;
        if (m == 0) return zero_division();
        double a = r->f_total[i] / (double)gpus, b = r->f_work[i] / (double)m;
        future += b > a ? b : a;
    }
    *out = current + future;
    return 0;
}

static int cmp_rank(const void *c, int a, int b) {
    const int *rank = c;
    return rank[a] - rank[b];
}

static PyObject *py_bids(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *offer, *held, *previous, *ties, *salt, *tie_of, *remaining, *slowdowns, *bid_type;
    Py_ssize_t max_new, per_k;
    double elapsed, t_id, rho_current, slow[4];
    if (!PyArg_ParseTuple(args, "O!OOnnO!UOOOdddO:bids", &OfferType, &offer, &held, &previous,
                          &max_new, &per_k, &PyDict_Type, &ties, &salt, &tie_of, &remaining,
                          &slowdowns, &elapsed, &t_id, &rho_current, &bid_type))
        return NULL;
    if (!PyCallable_Check(bid_type)) {
        PyErr_SetString(PyExc_TypeError, "bid_type must be callable");
        return NULL;
    }
    PyObject *sd = PySequence_Tuple(slowdowns);
    if (!sd) return NULL;
    if (PyTuple_GET_SIZE(sd) != 4) {
        Py_DECREF(sd);
        PyErr_SetString(PyExc_ValueError, "slowdowns: one per locality level (4)");
        return NULL;
    }
    for (int i = 0; i < 4; i++)
        if ((slow[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(sd, i))) == -1.0 && PyErr_Occurred()) {
            Py_DECREF(sd);
            return NULL;
        }
    Py_DECREF(sd);

    View v;
    IVec pos = {NULL, 0, 0}, start = {NULL, 0, 0};
    PyObject *rows = NULL, *out = NULL;
    int *sorted = NULL;
    Remaining rt;
    memset(&v, 0, sizeof(v));
    if (remaining_parse(&rt, remaining) < 0 || make_menu(&v, &pos, &start, offer, held, previous, max_new, per_k, ties, salt, tie_of) < 0 ||
        !(rows = PyList_New(0)))
        goto done;
    if (!(sorted = malloc((2 * (size_t)v.o->n + 1) * sizeof(int)))) {
        PyErr_NoMemory();
        goto done;
    }
    /* the bundles come by increasing size (sorted(menu, key=len) keeps the menu order) */
    double best = INFINITY, best_below = INFINITY, rem = 0.0;
    int size = 0;
    for (Py_ssize_t b = 0; b + 1 < start.len; b++) {
        const int *bundle = pos.v + start.v[b];
        int k = start.v[b + 1] - start.v[b];
        if (k != size) { /* a new size: remaining(held + k), once per size */
            best_below = best;
            size = k;
            if (remaining_time(&rt, (long long)v.n_held + k, &rem) < 0) goto done;
        }
        double value = (elapsed + slow[locality(&v, bundle, k)] * rem) / t_id;
        if (!isfinite(value) || value >= rho_current) continue;
        if (value >= best_below) continue; /* a smaller bundle already does as well */
        if (value < best) best = value;
        memcpy(sorted, bundle, (size_t)k * sizeof(int));
        stable_sort(sorted, k, sorted + k, cmp_rank, v.o->rank);
        PyObject *gids = PyTuple_New(k), *rho = NULL, *row = NULL;
        if (gids) {
            for (int j = 0; j < k; j++) {
                PyObject *gid = PyTuple_GET_ITEM(v.o->ids, sorted[j]);
                Py_INCREF(gid);
                PyTuple_SET_ITEM(gids, j, gid);
            }
            if ((rho = PyFloat_FromDouble(value))) {
                PyObject *argv[2] = {gids, rho};
                row = PyObject_Vectorcall(bid_type, argv, 2, NULL);
            }
        }
        Py_XDECREF(gids);
        Py_XDECREF(rho);
        if (!row || PyList_Append(rows, row) < 0) {
            Py_XDECREF(row);
            goto done;
        }
        Py_DECREF(row);
    }
    out = PyList_AsTuple(rows);
done:
    Py_XDECREF(rows);
    free(rt.mem);
    free(sorted);
    view_free(&v);
    free(pos.v);
    free(start.v);
    return out;
}

static PyMethodDef methods[] = {
    {"offer", py_offer, METH_O,
     "offer(gpus: Sequence[Gpu]) -> Offer | None (None when two GPUs share an id)"},
    {"menu", py_menu, METH_VARARGS,
     "menu(offer, held, previous, max_new, per_k, ties, salt, tie_of) -> list[list[Gpu]]"},
    {"bids", py_bids, METH_VARARGS,
     "bids(offer, held, previous, max_new, per_k, ties, salt, tie_of, remaining, slowdowns, "
     "elapsed, t_id, rho_current, bid_type) -> tuple of bid_type(gpu ids, rho)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_menu", "Compiled core of the agent's bid menus.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__menu(void) {
    if (!(s_id = PyUnicode_InternFromString("id")) ||
        !(s_machine = PyUnicode_InternFromString("machine")) ||
        !(s_rack = PyUnicode_InternFromString("rack")) ||
        !(s_slot = PyUnicode_InternFromString("slot")) || PyType_Ready(&OfferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&OfferType);
    if (PyModule_AddObject(m, "Offer", (PyObject *)&OfferType) < 0) {
        Py_DECREF(&OfferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
