/* Compiled core of the simulator's per-instant pass (themis.sim.engine.Simulator._advance,
 * themis.sim.state.AppState.progress): at every instant each app holding GPUs or running
 * jobs moves its jobs' progress to the instant, and the GPUs the apps could still use are
 * summed. It is a quarter of a long replay's time in Python (docs/preview.md, "How fast").
 *
 * advance(apps, now) takes the engine's apps (an iterable of AppState) and does, app by app
 * in that order, what the Python reference does: its room (open_demand - len(held), if
 * positive) is added to the sum first; then an app that holds GPUs or has busy jobs runs
 * AppState.progress(now) as written in state.py - the same floating-point operations in the
 * same order (built with -ffp-contract=off: no fused multiply-add), so every app's state is
 * bit for bit the reference's - and any other app only has its clock moved. It returns the
 * sum. An app whose clock is ahead of ``now`` is handed to its own Python progress(), which
 * raises the engine's error; any attribute of an unexpected type raises TypeError. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *s_open_demand, *s_held, *s_busy, *s_last_progress, *s_gpu_time, *s_stamp,
    *s_service, *s_score_time, *s_iters_done, *s_work_finished, *s_open_jobs, *s_unsettled,
    *s_gpus, *s_paused_until, *s_slowdown, *s_iters_left, *s_done_below, *s_demand,
    *s_iter_time, *s_iters_done_total, *s_index, *s_iters_phase, *s_progress;

/* obj.name as a double (a float, or an int as Python would convert it); -1 on error */
static int get_double(PyObject *obj, PyObject *name, double *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    double d = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    *out = d;
    return 0;
}

static int set_double(PyObject *obj, PyObject *name, double value) {
    PyObject *v = PyFloat_FromDouble(value);
    if (v == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* obj.name += value (a float attribute, as ``obj.name += value`` in Python) */
static int add_double(PyObject *obj, PyObject *name, double value) {
    double d;
    if (get_double(obj, name, &d) < 0) return -1;
    return set_double(obj, name, d + value);
}

static int get_long(PyObject *obj, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%U must be an int, not %.100s", name,
                     Py_TYPE(v)->tp_name);
        Py_DECREF(v);
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

static int set_long(PyObject *obj, PyObject *name, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* len(obj.name) */
static Py_ssize_t get_len(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    Py_ssize_t n = PyObject_Length(v);
    Py_DECREF(v);
    return n;
}

/* One job of AppState.progress's loop (state.py); t0 the app's last_progress. */
static int progress_job(PyObject *app, PyObject *job, double now, double t0, double dt,
                        PyObject *iters_done) {
    Py_ssize_t n = get_len(job, s_gpus);
    if (n < 0) return -1;
    double slowdown, paused_until, iters_left, done_below;
    if (get_double(job, s_slowdown, &slowdown) < 0) return -1;
    /* self.service += n * dt; self.score_time += n * dt / j.slowdown */
    if (add_double(app, s_service, (double)n * dt) < 0) return -1;
    if (add_double(app, s_score_time, (double)n * dt / slowdown) < 0) return -1;
    if (get_double(job, s_paused_until, &paused_until) < 0) return -1;
    double eff = now - (t0 > paused_until ? t0 : paused_until);
    if (!(eff > 0)) return 0;
    if (get_double(job, s_iters_left, &iters_left) < 0) return -1;
    if (get_double(job, s_done_below, &done_below) < 0) return -1;
    if (!(iters_left > done_below)) return 0;
    long long demand;
    double iter_time, total;
    if (get_long(job, s_demand, &demand) < 0) return -1;
    if (get_double(job, s_iter_time, &iter_time) < 0) return -1;
    /* rate = min(n, j.demand) / (j.iter_time * j.slowdown); min keeps the first of equals */
    long long used = demand < (long long)n ? demand : (long long)n;
    double rate = (double)used / (iter_time * slowdown);
    double want = rate * eff;
    double step = want < iters_left ? want : iters_left; /* min(j.iters_left, rate * eff) */
    iters_left = iters_left - step;
    if (set_double(job, s_iters_left, iters_left) < 0) return -1;
    if (get_double(job, s_iters_done_total, &total) < 0) return -1;
    total = total + step;
    PyObject *tv = PyFloat_FromDouble(total);
    if (tv == NULL) return -1;
    if (PyObject_SetAttr(job, s_iters_done_total, tv) < 0) {
        Py_DECREF(tv);
        return -1;
    }
    PyObject *index = PyObject_GetAttr(job, s_index);
    if (index == NULL) {
        Py_DECREF(tv);
        return -1;
    }
    int rc = PyObject_SetItem(iters_done, index, tv); /* self.iters_done[j.index] = ... */
    Py_DECREF(index);
    Py_DECREF(tv);
    if (rc < 0) return -1;
    if (iters_left <= done_below) { /* just finished */
        double iters_phase;
        long long open_jobs, open_demand;
        if (get_double(job, s_iters_phase, &iters_phase) < 0) return -1;
        if (add_double(app, s_work_finished, iters_phase * iter_time) < 0) return -1;
        if (get_long(app, s_open_jobs, &open_jobs) < 0) return -1;
        if (set_long(app, s_open_jobs, open_jobs - 1) < 0) return -1;
        if (get_long(app, s_open_demand, &open_demand) < 0) return -1;
        if (set_long(app, s_open_demand, open_demand - demand) < 0) return -1;
        if (PyObject_SetAttr(app, s_unsettled, Py_True) < 0) return -1;
    }
    return 0;
}

/* AppState.progress(now) for an app whose clock is t0 <= now + 1e-9 */
static int progress_app(PyObject *app, PyObject *busy, Py_ssize_t n_held, PyObject *now_obj,
                        double now, double t0) {
    double dt = now - t0;
    if (!(dt > 0.0)) dt = 0.0; /* max(0.0, now - t0) */
    if (add_double(app, s_gpu_time, (double)n_held * dt) < 0) return -1;
    Py_ssize_t n_busy = PyList_GET_SIZE(busy);
    if (n_busy > 0) {
        long long stamp;
        if (get_long(app, s_stamp, &stamp) < 0) return -1;
        if (set_long(app, s_stamp, stamp + 1) < 0) return -1;
        PyObject *iters_done = PyObject_GetAttr(app, s_iters_done);
        if (iters_done == NULL) return -1;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(busy); k++) {
            PyObject *job = PyList_GET_ITEM(busy, k);
            Py_INCREF(job);
            int rc = progress_job(app, job, now, t0, dt, iters_done);
            Py_DECREF(job);
            if (rc < 0) {
                Py_DECREF(iters_done);
                return -1;
            }
        }
        Py_DECREF(iters_done);
    }
    return PyObject_SetAttr(app, s_last_progress, now_obj); /* self.last_progress = now */
}

static PyObject *advance(PyObject *self, PyObject *args) {
    PyObject *apps;
    double now;
    if (!PyArg_ParseTuple(args, "Od:advance", &apps, &now)) return NULL;
    PyObject *it = PyObject_GetIter(apps);
    if (it == NULL) return NULL;
    long long wanted = 0;
    PyObject *app;
    while ((app = PyIter_Next(it)) != NULL) {
        int ok = -1;
        PyObject *busy = NULL;
        Py_ssize_t n_held = get_len(app, s_held);
        long long demand;
        if (n_held < 0 || get_long(app, s_open_demand, &demand) < 0) goto done;
        if (demand - n_held > 0) wanted += demand - n_held; /* AppState.room() */
        busy = PyObject_GetAttr(app, s_busy);
        if (busy == NULL) goto done;
        if (!PyList_Check(busy)) {
            PyErr_SetString(PyExc_TypeError, "AppState.busy must be a list");
            goto done;
        }
        if (PyList_GET_SIZE(busy) > 0 || n_held > 0) {
            double t0;
            if (get_double(app, s_last_progress, &t0) < 0) goto done;
            if (now < t0 - 1e-9) { /* the reference raises the engine's error */
                PyObject *r = PyObject_CallMethodOneArg(app, s_progress,
                                                        PyTuple_GET_ITEM(args, 1));
                Py_XDECREF(r);
                if (r == NULL) goto done;
                ok = 0;
                goto done;
            }
            ok = progress_app(app, busy, n_held, PyTuple_GET_ITEM(args, 1), now, t0);
        } else { /* holds nothing: progress(t) would only move its clock */
            ok = PyObject_SetAttr(app, s_last_progress, PyTuple_GET_ITEM(args, 1));
        }
    done:
        Py_XDECREF(busy);
        Py_DECREF(app);
        if (ok < 0) {
            Py_DECREF(it);
            return NULL;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLongLong(wanted);
}

static PyMethodDef methods[] = {
    {"advance", advance, METH_VARARGS,
     "advance(apps, now) -> int: every app's AppState.progress(now) (or, holding nothing, "
     "its clock moved), in order; returns the sum of the apps' room before they moved"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_progress",
                                    "Compiled core of the simulator's per-instant pass.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__progress(void) {
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_open_demand, "open_demand"}, {&s_held, "held"}, {&s_busy, "busy"},
        {&s_last_progress, "last_progress"}, {&s_gpu_time, "gpu_time"}, {&s_stamp, "stamp"},
        {&s_service, "service"}, {&s_score_time, "score_time"}, {&s_iters_done, "iters_done"},
        {&s_work_finished, "work_finished"}, {&s_open_jobs, "open_jobs"},
        {&s_unsettled, "unsettled"}, {&s_gpus, "gpus"}, {&s_paused_until, "paused_until"},
        {&s_slowdown, "slowdown"}, {&s_iters_left, "iters_left"},
        {&s_done_below, "done_below"}, {&s_demand, "demand"}, {&s_iter_time, "iter_time"},
        {&s_iters_done_total, "iters_done_total"}, {&s_index, "index"},
        {&s_iters_phase, "iters_phase"}, {&s_progress, "progress"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].name);
        if (*names[i].slot == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
