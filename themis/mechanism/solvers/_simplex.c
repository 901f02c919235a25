/* A warm-started bounded dual simplex for the LP relaxation of the packing problem
 * (themis.mechanism.solvers.lpbb): maximise gain.x subject to A x <= b, lo <= x <= hi, with
 * lo, hi in [0, 1] and b >= 0, where rows are added (cuts) and column bounds change
 * between solves. See themis/mechanism/solvers/lp_engines.py for the Python side.
 *
 * Internally: minimise cost.x with cost = -gain, a slack s_r >= 0 per row (A x + s = b).
 * The basis holds k structural columns S and the slacks of the other rows; the rows R1
 * whose slack is non-basic (|R1| = k) give the k x k kernel M = A[R1, S] and, ordering
 * the basis as (S, slacks of R2),
 *
 *     B^-1 = [[W, 0], [-A[R2, S] W, I]]   with W = M^-1,
 *
 * so only W (dense, k x k) is kept. Each pivot changes W by a rank-one update, a border
 * or the removal of a row and column (the four cases: which of the leaving and entering
 * variables is a slack); W is rebuilt from A every REFACTOR_EVERY pivots. Adding a row
 * (a cut) adds a basic slack and leaves W as it is, and a changed bound keeps the basis
 * dual feasible (boxed columns move to the bound their reduced cost asks for), so every
 * solve after the first starts from the last optimal basis.
 *
 * The ratio test is Harris' two-pass test (largest pivot among the near-ties). Nothing
 * here is trusted for pruning: the caller recomputes a weak-duality bound from the
 * returned row duals. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BASIC 0
#define AT_LO 1
#define AT_HI 2

#define PRIMAL_TOL 1e-9
#define DUAL_TOL 1e-9
#define PIVOT_TOL 1e-9
#define REFACTOR_EVERY 64
#define MAX_ITER_FACTOR 50

enum { OK = 0, ITERATION_LIMIT = 1, NUMERICAL = 2, INFEASIBLE = 3, CUTOFF = 4 };

typedef struct {
    PyObject_HEAD
    int n, m, m_cap;
    /* rows (CSR, appendable) */
    int *rstart, *rind;
    double *rval;
    int nnz, nnz_cap;
    /* columns (CSC, rebuilt after rows are added) */
    int *cstart, *cind;
    double *cval;
    int csc_dirty;
    double *cost, *b, *lo, *hi;
    /* variables 0..n-1 structural, n + r the slack of row r */
    double *x, *d;
    signed char *status;
    /* basis */
    int k, kcap;
    int *S, *R1, *spos, *r1pos;
    double *W; /* kcap x kcap, row i = S position, column t = R1 position */
    int updates, fresh;
    /* work */
    double *rho, *alpha, *zS, *zR, *acc, *h;
    int *cand, *flip; /* ratio test: candidates, columns passed (bound flips) */
    double *cratio, *cbound, *cabs;
    long iterations; /* of the last solve */
    long total_iterations;
    /* a saved basis (save_basis / restore_basis): its rows then, kernel size, basic
     * columns S and kernel rows R1, the statuses of the n + saved_m variables, W */
    int saved, saved_m, saved_k, saved_updates;
    int *saved_S, *saved_R1;
    signed char *saved_status;
    double *saved_W; /* saved_k x saved_k */
    int *nzt; /* work: kernel positions t with a non-zero right-hand side */
} Lp;

static int grow_int(int **p, size_t n) {
    int *q = realloc(*p, (n ? n : 1) * sizeof(int));
    if (!q) return -1;
    *p = q;
    return 0;
}
static int grow_dbl(double **p, size_t n) {
    double *q = realloc(*p, (n ? n : 1) * sizeof(double));
    if (!q) return -1;
    *p = q;
    return 0;
}

/* Make room for m_new rows (variables n + r, per-row arrays, work arrays). */
static int reserve_rows(Lp *lp, int m_new) {
    if (m_new <= lp->m_cap) return 0;
    int cap = lp->m_cap ? lp->m_cap : 16;
    while (cap < m_new) cap *= 2;
    size_t nv = (size_t)lp->n + cap;
    if (grow_int(&lp->rstart, cap + 1) || grow_dbl(&lp->b, cap) || grow_int(&lp->R1, cap) ||
        grow_int(&lp->r1pos, cap) || grow_int(&lp->nzt, cap) || grow_dbl(&lp->x, nv) ||
        grow_dbl(&lp->d, nv) || grow_dbl(&lp->rho, cap) || grow_dbl(&lp->alpha, nv) || grow_dbl(&lp->zR, cap) ||
        grow_dbl(&lp->acc, cap) || grow_dbl(&lp->h, cap) || grow_int(&lp->cand, nv) ||
        grow_int(&lp->flip, nv) || grow_dbl(&lp->cratio, nv) || grow_dbl(&lp->cbound, nv) ||
        grow_dbl(&lp->cabs, nv))
        return -1;
    signed char *st = realloc(lp->status, nv);
    if (!st) return -1;
    lp->status = st;
    lp->m_cap = cap;
    return 0;
}

static int reserve_kernel(Lp *lp, int k_new) {
    if (k_new <= lp->kcap) return 0;
    int cap = lp->kcap ? lp->kcap : 16;
    while (cap < k_new) cap *= 2;
    double *w = calloc((size_t)cap * cap, sizeof(double));
    if (!w) return -1;
    for (int i = 0; i < lp->k; i++)
        memcpy(w + (size_t)i * cap, lp->W + (size_t)i * lp->kcap, lp->k * sizeof(double));
    free(lp->W);
    lp->W = w;
    if (grow_int(&lp->S, cap) || grow_dbl(&lp->zS, cap)) return -1;
    lp->kcap = cap;
    return 0;
}

static int build_csc(Lp *lp) {
    if (!lp->csc_dirty) return 0;
    if (grow_int(&lp->cstart, lp->n + 1) || grow_int(&lp->cind, lp->nnz) ||
        grow_dbl(&lp->cval, lp->nnz))
        return -1;
    memset(lp->cstart, 0, (lp->n + 1) * sizeof(int));
    for (int e = 0; e < lp->nnz; e++) lp->cstart[lp->rind[e] + 1]++;
    for (int j = 0; j < lp->n; j++) lp->cstart[j + 1] += lp->cstart[j];
    int *fill = malloc((lp->n ? lp->n : 1) * sizeof(int));
    if (!fill) return -1;
    memcpy(fill, lp->cstart, lp->n * sizeof(int));
    for (int r = 0; r < lp->m; r++)
        for (int e = lp->rstart[r]; e < lp->rstart[r + 1]; e++) {
            int j = lp->rind[e], at = fill[j]++;
            lp->cind[at] = r;
            lp->cval[at] = lp->rval[e];
        }
    free(fill);
    lp->csc_dirty = 0;
    return 0;
}

#define WAT(lp, i, t) ((lp)->W[(size_t)(i) * (lp)->kcap + (t)])

/* The all-slack basis; boxed columns at the bound their cost asks for. */
static void slack_basis(Lp *lp) {
    lp->k = 0;
    for (int j = 0; j < lp->n; j++) {
        lp->spos[j] = -1;
        lp->status[j] = lp->cost[j] < 0 ? AT_HI : AT_LO;
    }
    for (int r = 0; r < lp->m; r++) {
        lp->r1pos[r] = -1;
        lp->status[lp->n + r] = BASIC;
    }
    lp->updates = 0;
    lp->fresh = 1;
}

/* W = A[R1, S]^-1 by Gauss-Jordan elimination with partial pivoting. */
static int refactor(Lp *lp) {
    int k = lp->k;
    lp->updates = 0;
    if (k == 0) return 0;
    size_t kk = (size_t)k;
    double *a = calloc(kk * 2 * kk, sizeof(double)); /* [M | I], row t of M = row R1[t] */
    if (!a) return -1;
    size_t w2 = 2 * kk;
    for (int t = 0; t < k; t++) {
        int r = lp->R1[t];
        for (int e = lp->rstart[r]; e < lp->rstart[r + 1]; e++) {
            int i = lp->spos[lp->rind[e]];
            if (i >= 0) a[t * w2 + i] = lp->rval[e];
        }
        a[t * w2 + kk + t] = 1.0;
    }
    for (size_t c = 0; c < kk; c++) {
        size_t piv = c;
        double best = fabs(a[c * w2 + c]);
        for (size_t r = c + 1; r < kk; r++)
            if (fabs(a[r * w2 + c]) > best) best = fabs(a[r * w2 + c]), piv = r;
        if (best < 1e-11) {
            free(a);
            return 1; /* singular */
        }
        if (piv != c)
            for (size_t q = 0; q < w2; q++) {
                double t = a[c * w2 + q];
                a[c * w2 + q] = a[piv * w2 + q];
                a[piv * w2 + q] = t;
            }
        /* columns before c of the pivot row are zero by now (eliminated): the row
         * operations start at c (the values are those of full-width operations) */
        double inv = 1.0 / a[c * w2 + c];
        for (size_t q = c; q < w2; q++) a[c * w2 + q] *= inv;
        for (size_t r = 0; r < kk; r++) {
            double f = a[r * w2 + c];
            if (r == c || f == 0.0) continue;
            for (size_t q = c; q < w2; q++) a[r * w2 + q] -= f * a[c * w2 + q];
        }
    }
    /* [I | M^-1]: row c of M^-1 belongs to column c of M, i.e. S position c */
    for (int i = 0; i < k; i++)
        for (int t = 0; t < k; t++) WAT(lp, i, t) = a[(size_t)i * w2 + kk + t];
    free(a);
    return 0;
}

/* Basic values from the non-basic ones: x_S = W h[R1], slacks of R2 rows = b - A x. */
static void compute_primal(Lp *lp) {
    int n = lp->n, m = lp->m, k = lp->k;
    for (int r = 0; r < m; r++) {
        if (lp->r1pos[r] < 0) continue; /* h is read on the rows of R1 only */
        double v = lp->b[r];
        for (int e = lp->rstart[r]; e < lp->rstart[r + 1]; e++) {
            int j = lp->rind[e];
            if (lp->status[j] != BASIC) v -= lp->rval[e] * lp->x[j];
        }
        lp->h[r] = v;
    }
    for (int i = 0; i < k; i++) {
        double v = 0.0;
        const double *w = &WAT(lp, i, 0);
        for (int t = 0; t < k; t++) v += w[t] * lp->h[lp->R1[t]];
        lp->x[lp->S[i]] = v;
    }
    for (int r = 0; r < m; r++) {
        if (lp->r1pos[r] >= 0) {
            lp->x[n + r] = 0.0;
            continue;
        }
        double v = lp->b[r];
        for (int e = lp->rstart[r]; e < lp->rstart[r + 1]; e++) v -= lp->rval[e] * lp->x[lp->rind[e]];
        lp->x[n + r] = v;
    }
}

/* Row duals (min form) y[R1[t]] = sum_i cost[S[i]] W[i, t], 0 on R2; into lp->rho. */
static void compute_y(Lp *lp, double *y) {
    for (int r = 0; r < lp->m; r++) y[r] = 0.0;
    for (int i = 0; i < lp->k; i++) {
        double c = lp->cost[lp->S[i]];
        if (c == 0.0) continue;
        const double *w = &WAT(lp, i, 0);
        for (int t = 0; t < lp->k; t++) y[lp->R1[t]] += c * w[t];
    }
}

static void compute_duals(Lp *lp) {
    int n = lp->n;
    double *y = lp->rho;
    compute_y(lp, y);
    for (int j = 0; j < n; j++) {
        if (lp->status[j] == BASIC) {
            lp->d[j] = 0.0;
            continue;
        }
        double v = lp->cost[j];
        for (int e = lp->cstart[j]; e < lp->cstart[j + 1]; e++) v -= lp->cval[e] * y[lp->cind[e]];
        lp->d[j] = v;
    }
    for (int r = 0; r < lp->m; r++) lp->d[n + r] = lp->status[n + r] == BASIC ? 0.0 : -y[r];
}

static double lower_of(Lp *lp, int v) { return v < lp->n ? lp->lo[v] : 0.0; }
static double upper_of(Lp *lp, int v) { return v < lp->n ? lp->hi[v] : INFINITY; }

/* Put each non-basic column at the bound its reduced cost asks for. */
static void place_nonbasic(Lp *lp) {
    for (int j = 0; j < lp->n; j++) {
        if (lp->status[j] == BASIC) continue;
        if (lp->lo[j] == lp->hi[j]) {
            lp->status[j] = AT_LO;
            lp->x[j] = lp->lo[j];
            continue;
        }
        if (lp->d[j] > DUAL_TOL)
            lp->status[j] = AT_LO;
        else if (lp->d[j] < -DUAL_TOL)
            lp->status[j] = AT_HI;
        lp->x[j] = lp->status[j] == AT_HI ? lp->hi[j] : lp->lo[j];
    }
}

static int fresh_start(Lp *lp) {
    int rc = refactor(lp);
    if (rc != 0) {
        if (rc < 0) return -1;
        slack_basis(lp); /* singular kernel: start over */
    }
    compute_duals(lp);
    place_nonbasic(lp);
    compute_primal(lp);
    return 0;
}

/* One dual simplex solve from the current basis; CUTOFF (the basis kept, dual feasible)
 * once the objective of the basic solution - the max form's dual objective, an upper
 * bound of the LP while the basis is dual feasible - is at most ``cutoff``. */
static int dual_simplex(Lp *lp, double cutoff) {
    int n = lp->n, m = lp->m;
    long limit = (long)MAX_ITER_FACTOR * (n + m) + 1000;
    lp->iterations = 0;
    int retried = 0;
    for (;;) {
        if (lp->updates >= REFACTOR_EVERY) {
            if (fresh_start(lp) < 0) return -1;
        }
        /* leaving variable: the largest bound violation among the basic ones */
        int p = -1;
        double delta = 0.0, worst = PRIMAL_TOL;
        for (int i = 0; i < lp->k; i++) {
            int j = lp->S[i];
            double v = lp->x[j];
            if (v < lp->lo[j] - worst) worst = lp->lo[j] - v, p = j, delta = v - lp->lo[j];
            else if (v > lp->hi[j] + worst) worst = v - lp->hi[j], p = j, delta = v - lp->hi[j];
        }
        for (int r = 0; r < m; r++) {
            if (lp->r1pos[r] >= 0) continue;
            double v = lp->x[n + r];
            if (v < -worst) worst = -v, p = n + r, delta = v;
        }
        if (p < 0) return OK;
        if (cutoff > -INFINITY) {
            double obj = 0.0; /* max form: -cost . x */
            for (int j = 0; j < n; j++) obj -= lp->cost[j] * lp->x[j];
            if (obj <= cutoff) return CUTOFF;
        }
        if (++lp->iterations > limit) return ITERATION_LIMIT;
        /* row of B^-1 for p, over the rows (rho), and the pivot row alpha */
        int k = lp->k;
        int ip = -1, rp = -1; /* S position of p, or its row */
        if (p < n) {
            ip = lp->spos[p];
            for (int t = 0; t < k; t++) lp->rho[lp->R1[t]] = WAT(lp, ip, t);
        } else {
            rp = p - n;
            double *v = lp->zS; /* scratch: v = A[rp, S] W, R1-indexed */
            for (int t = 0; t < k; t++) v[t] = 0.0;
            for (int e = lp->rstart[rp]; e < lp->rstart[rp + 1]; e++) {
                int i = lp->spos[lp->rind[e]];
                if (i < 0) continue;
                double a = lp->rval[e];
                const double *w = &WAT(lp, i, 0);
                for (int t = 0; t < k; t++) v[t] += a * w[t];
            }
            for (int t = 0; t < k; t++) lp->rho[lp->R1[t]] = -v[t];
        }
        for (int j = 0; j < n; j++) lp->alpha[j] = 0.0;
        for (int t = 0; t < k; t++) {
            int r = lp->R1[t];
            double f = lp->rho[r];
            lp->alpha[n + r] = f;
            if (f == 0.0) continue;
            for (int e = lp->rstart[r]; e < lp->rstart[r + 1]; e++) lp->alpha[lp->rind[e]] += f * lp->rval[e];
        }
        if (rp >= 0)
            for (int e = lp->rstart[rp]; e < lp->rstart[rp + 1]; e++) lp->alpha[lp->rind[e]] += lp->rval[e];
        /* Ratio test on alpha~ = sign(delta) alpha: Harris' two passes (the largest
         * pivot among the near-ties), with bound flipping - a boxed column whose
         * breakpoint comes first moves to its other bound instead of entering while the
         * leaving variable stays infeasible (the long-step rule; most columns here are
         * boxed in [0, 1], and it cut the pivots of a cold 256-GPU x 50-app solve ~6x) */
        double sg = delta < 0 ? -1.0 : 1.0;
        int nc = 0;
        for (int v = 0; v < n + m; v++) {
            signed char st = lp->status[v];
            if (st == BASIC) continue;
            if (v >= n && lp->r1pos[v - n] < 0) continue;
            if (v < n && lp->lo[v] == lp->hi[v]) continue;
            double a = sg * lp->alpha[v];
            if (st == AT_LO && a > PIVOT_TOL) {
                lp->cbound[nc] = (lp->d[v] + DUAL_TOL) / a;
            } else if (st == AT_HI && a < -PIVOT_TOL) {
                lp->cbound[nc] = (lp->d[v] - DUAL_TOL) / a;
            } else {
                continue;
            }
            lp->cand[nc] = v;
            lp->cratio[nc] = lp->d[v] / a;
            lp->cabs[nc] = fabs(a);
            nc++;
        }
        double slope = fabs(delta);
        int nflip = 0, q = -1;
        while (nc > 0) {
            double tmax = INFINITY;
            for (int c = 0; c < nc; c++)
                if (lp->cbound[c] < tmax) tmax = lp->cbound[c];
            double red = 0.0, best = 0.0;
            int boxed = 1, bi = -1;
            for (int c = 0; c < nc; c++) {
                if (lp->cratio[c] > tmax) continue;
                int v = lp->cand[c];
                if (v >= n) boxed = 0;
                else red += lp->cabs[c] * (lp->hi[v] - lp->lo[v]);
                if (lp->cabs[c] > best) best = lp->cabs[c], bi = c;
            }
            if (boxed && slope - red > PRIMAL_TOL) {
                slope -= red;
                int keep = 0;
                for (int c = 0; c < nc; c++) {
                    if (lp->cratio[c] <= tmax) {
                        lp->flip[nflip++] = lp->cand[c];
                    } else {
                        lp->cand[keep] = lp->cand[c];
                        lp->cratio[keep] = lp->cratio[c];
                        lp->cbound[keep] = lp->cbound[c];
                        lp->cabs[keep] = lp->cabs[c];
                        keep++;
                    }
                }
                nc = keep;
                continue;
            }
            q = lp->cand[bi];
            break;
        }
        if (q < 0) return INFEASIBLE;
        double theta = lp->d[q] / (sg * lp->alpha[q]);
        if (theta < 0) theta = 0.0;
        if (nflip > 0) {
            /* the passed columns move to their other bound: x_B -= B^-1 (sum a_j dx_j) */
            double *db = lp->h, *z = lp->zS;
            for (int r = 0; r < m; r++) db[r] = 0.0;
            for (int f = 0; f < nflip; f++) {
                int j = lp->flip[f];
                double dx = lp->status[j] == AT_LO ? lp->hi[j] - lp->lo[j] : lp->lo[j] - lp->hi[j];
                lp->status[j] = lp->status[j] == AT_LO ? AT_HI : AT_LO;
                lp->x[j] += dx;
                for (int e = lp->cstart[j]; e < lp->cstart[j + 1]; e++) db[lp->cind[e]] += lp->cval[e] * dx;
            }
            /* z = W db[R1]: db is non-zero on the few rows of the passed columns, and
             * the terms are summed in the same order (t ascending) as the dense product,
             * zeros left out (adding w * 0 changes no sum but for the sign of a zero) */
            int nt = 0;
            for (int t = 0; t < k; t++)
                if (db[lp->R1[t]] != 0.0) lp->nzt[nt++] = t;
            for (int i = 0; i < k; i++) {
                double v = 0.0;
                const double *w = &WAT(lp, i, 0);
                for (int u = 0; u < nt; u++) v += w[lp->nzt[u]] * db[lp->R1[lp->nzt[u]]];
                z[i] = v;
                lp->x[lp->S[i]] -= v;
            }
            for (int r = 0; r < m; r++) lp->acc[r] = 0.0;
            for (int i = 0; i < k; i++) {
                if (z[i] == 0.0) continue;
                int j = lp->S[i];
                for (int e = lp->cstart[j]; e < lp->cstart[j + 1]; e++) lp->acc[lp->cind[e]] += lp->cval[e] * z[i];
            }
            for (int r = 0; r < m; r++)
                if (lp->r1pos[r] < 0) lp->x[n + r] -= db[r] - lp->acc[r];
            delta = lp->x[p] - (delta < 0 ? lower_of(lp, p) : upper_of(lp, p));
        }
        /* column of B^-1 A for q: zS on S, zR on the rows of R2 */
        int tq = -1; /* R1 position of q's row when q is a slack */
        if (q < n) {
            for (int i = 0; i < k; i++) lp->zS[i] = 0.0;
            for (int e = lp->cstart[q]; e < lp->cstart[q + 1]; e++) {
                int t = lp->r1pos[lp->cind[e]];
                if (t < 0) continue;
                double a = lp->cval[e];
                for (int i = 0; i < k; i++) lp->zS[i] += WAT(lp, i, t) * a;
            }
        } else {
            tq = lp->r1pos[q - n];
            for (int i = 0; i < k; i++) lp->zS[i] = WAT(lp, i, tq);
        }
        for (int r = 0; r < m; r++) lp->acc[r] = 0.0;
        for (int i = 0; i < k; i++) {
            double z = lp->zS[i];
            if (z == 0.0) continue;
            int j = lp->S[i];
            for (int e = lp->cstart[j]; e < lp->cstart[j + 1]; e++) lp->acc[lp->cind[e]] += lp->cval[e] * z;
        }
        if (q < n)
            for (int e = lp->cstart[q]; e < lp->cstart[q + 1]; e++) lp->acc[lp->cind[e]] -= lp->cval[e];
        /* zR[r] = a_q[r] - A[r, S] zS = -acc[r] for r in R2 */
        for (int r = 0; r < m; r++) lp->zR[r] = lp->r1pos[r] >= 0 ? 0.0 : -lp->acc[r];
        double piv = p < n ? lp->zS[ip] : lp->zR[rp];
        double check = lp->alpha[q];
        if (fabs(piv) < PIVOT_TOL || fabs(piv - check) > 1e-7 * (1.0 + fabs(piv))) {
            /* the updated kernel drifted: rebuild it and try again */
            if (retried) return NUMERICAL;
            retried = 1;
            if (fresh_start(lp) < 0) return -1;
            continue;
        }
        retried = 0;
        /* primal step */
        double tp = delta / piv;
        for (int i = 0; i < k; i++) lp->x[lp->S[i]] -= tp * lp->zS[i];
        for (int r = 0; r < m; r++)
            if (lp->r1pos[r] < 0) lp->x[n + r] -= tp * lp->zR[r];
        lp->x[q] += tp;
        lp->x[p] = delta < 0 ? lower_of(lp, p) : upper_of(lp, p);
        /* dual step */
        for (int v = 0; v < n + m; v++) {
            if (lp->status[v] == BASIC) continue;
            if (v >= n && lp->r1pos[v - n] < 0) continue;
            lp->d[v] -= theta * sg * lp->alpha[v];
        }
        lp->d[q] = 0.0;
        lp->d[p] = -theta * sg;
        lp->status[q] = BASIC;
        lp->status[p] = delta < 0 ? AT_LO : AT_HI;
        /* kernel update */
        if (p < n && q < n) { /* structural for structural: column i of M replaced */
            double *wi = &WAT(lp, ip, 0);
            double inv = 1.0 / piv;
            for (int t = 0; t < k; t++) wi[t] *= inv;
            for (int i = 0; i < k; i++) {
                if (i == ip || lp->zS[i] == 0.0) continue;
                double f = lp->zS[i];
                double *wr = &WAT(lp, i, 0);
                for (int t = 0; t < k; t++) wr[t] -= f * wi[t];
            }
            lp->S[ip] = q;
            lp->spos[q] = ip;
            lp->spos[p] = -1;
        } else if (p < n) { /* structural leaves, slack of R1 row enters: shrink */
            double *wi = &WAT(lp, ip, 0);
            double inv = 1.0 / wi[tq];
            for (int i = 0; i < k; i++) {
                if (i == ip) continue;
                double f = WAT(lp, i, tq) * inv;
                if (f == 0.0) continue;
                double *wr = &WAT(lp, i, 0);
                for (int t = 0; t < k; t++) wr[t] -= f * wi[t];
            }
            int last = k - 1;
            if (ip != last) {
                memcpy(&WAT(lp, ip, 0), &WAT(lp, last, 0), k * sizeof(double));
                lp->S[ip] = lp->S[last];
                lp->spos[lp->S[ip]] = ip;
            }
            if (tq != last) {
                for (int i = 0; i < last; i++) WAT(lp, i, tq) = WAT(lp, i, last);
                lp->R1[tq] = lp->R1[last];
                lp->r1pos[lp->R1[tq]] = tq;
            }
            lp->spos[p] = -1;
            lp->r1pos[q - n] = -1;
            lp->k = last;
        } else if (q < n) { /* slack of R2 row leaves, structural enters: border */
            if (reserve_kernel(lp, k + 1) < 0) return -1;
            double *v = lp->h; /* v = A[rp, S] W = -rho[R1], R1-indexed */
            for (int t = 0; t < k; t++) v[t] = -lp->rho[lp->R1[t]];
            double inv = 1.0 / piv;
            for (int i = 0; i < k; i++) {
                double f = lp->zS[i] * inv;
                double *wr = &WAT(lp, i, 0);
                if (f != 0.0)
                    for (int t = 0; t < k; t++) wr[t] += f * v[t];
                wr[k] = -lp->zS[i] * inv;
            }
            double *wk = &WAT(lp, k, 0);
            for (int t = 0; t < k; t++) wk[t] = -v[t] * inv;
            wk[k] = inv;
            lp->S[k] = q;
            lp->spos[q] = k;
            lp->R1[k] = rp;
            lp->r1pos[rp] = k;
            lp->k = k + 1;
        } else { /* slack for slack: row tq of M replaced by row rp */
            double *v = lp->h;
            for (int t = 0; t < k; t++) v[t] = -lp->rho[lp->R1[t]];
            double vt = v[tq];
            v[tq] -= 1.0;
            for (int i = 0; i < k; i++) {
                double f = lp->zS[i] / vt;
                if (f == 0.0) continue;
                double *wr = &WAT(lp, i, 0);
                for (int t = 0; t < k; t++) wr[t] -= f * v[t];
            }
            int t_row = q - n;
            lp->R1[tq] = rp;
            lp->r1pos[rp] = tq;
            lp->r1pos[t_row] = -1;
        }
        lp->updates++;
    }
}

/* ---- Python type ---------------------------------------------------------------------- */

static void Lp_dealloc(Lp *lp) {
    free(lp->rstart); free(lp->rind); free(lp->rval);
    free(lp->cstart); free(lp->cind); free(lp->cval);
    free(lp->cost); free(lp->b); free(lp->lo); free(lp->hi);
    free(lp->x); free(lp->d); free(lp->status);
    free(lp->S); free(lp->R1); free(lp->spos); free(lp->r1pos); free(lp->W);
    free(lp->rho); free(lp->alpha); free(lp->zS); free(lp->zR); free(lp->acc); free(lp->h);
    free(lp->cand); free(lp->flip); free(lp->cratio); free(lp->cbound); free(lp->cabs);
    free(lp->saved_S); free(lp->saved_R1); free(lp->saved_status); free(lp->saved_W);
    free(lp->nzt);
    Py_TYPE(lp)->tp_free((PyObject *)lp);
}

static int get_buf(PyObject *o, Py_buffer *v, const char *fmt, Py_ssize_t len, int writable,
                   const char *what) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (strcmp(v->format, fmt) != 0 || (len >= 0 && v->len / v->itemsize != len)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of format '%s', got %zd of '%s'",
                     what, len, fmt, v->len / v->itemsize, v->format);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static int append_row(Lp *lp, const int *cols, const double *vals, int len, double rhs) {
    if (reserve_rows(lp, lp->m + 1) < 0) return -1;
    if (lp->nnz + len > lp->nnz_cap) {
        int cap = lp->nnz_cap ? lp->nnz_cap : 64;
        while (cap < lp->nnz + len) cap *= 2;
        if (grow_int(&lp->rind, cap) || grow_dbl(&lp->rval, cap)) return -1;
        lp->nnz_cap = cap;
    }
    int r = lp->m;
    lp->rstart[r] = lp->nnz;
    for (int e = 0; e < len; e++) {
        lp->rind[lp->nnz] = cols[e];
        lp->rval[lp->nnz] = vals[e];
        lp->nnz++;
    }
    lp->rstart[r + 1] = lp->nnz;
    lp->b[r] = rhs;
    lp->r1pos[r] = -1;
    lp->status[lp->n + r] = BASIC;
    lp->d[lp->n + r] = 0.0;
    /* the new slack is basic: its value from the current x */
    double v = rhs;
    for (int e = 0; e < len; e++) v -= vals[e] * lp->x[cols[e]];
    lp->x[lp->n + r] = v;
    lp->m = r + 1;
    lp->csc_dirty = 1;
    return 0;
}

static int Lp_init(Lp *lp, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"n_rows", "starts", "index", "values", "gain", NULL};
    int n_rows;
    PyObject *o_starts, *o_index, *o_values, *o_gain;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iOOOO", kwlist, &n_rows, &o_starts, &o_index,
                                     &o_values, &o_gain))
        return -1;
    Py_buffer gain, starts, index, values;
    if (get_buf(o_gain, &gain, "d", -1, 0, "gain") < 0) return -1;
    int n = (int)(gain.len / gain.itemsize);
    if (get_buf(o_starts, &starts, "i", n + 1, 0, "starts") < 0) {
        PyBuffer_Release(&gain);
        return -1;
    }
    const int *cs = starts.buf;
    int nnz = cs[n];
    if (get_buf(o_index, &index, "i", nnz, 0, "index") < 0) {
        PyBuffer_Release(&gain); PyBuffer_Release(&starts);
        return -1;
    }
    if (get_buf(o_values, &values, "d", nnz, 0, "values") < 0) {
        PyBuffer_Release(&gain); PyBuffer_Release(&starts); PyBuffer_Release(&index);
        return -1;
    }
    int rc = -1;
    const int *ci = index.buf;
    const double *cv = values.buf, *g = gain.buf;
    lp->n = n;
    lp->cost = malloc((n ? n : 1) * sizeof(double));
    lp->lo = calloc(n ? n : 1, sizeof(double));
    lp->hi = malloc((n ? n : 1) * sizeof(double));
    lp->spos = malloc((n ? n : 1) * sizeof(int));
    if (!lp->cost || !lp->lo || !lp->hi || !lp->spos || reserve_rows(lp, n_rows) < 0 ||
        reserve_kernel(lp, 16) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (int j = 0; j < n; j++) {
        lp->cost[j] = -g[j];
        lp->hi[j] = 1.0;
    }
    for (int e = 0; e < nnz; e++)
        if (ci[e] < 0 || ci[e] >= n_rows) {
            PyErr_Format(PyExc_ValueError, "index: row %d out of range [0, %d)", ci[e], n_rows);
            goto done;
        }
    /* rows from the columns */
    int *count = calloc(n_rows + 1, sizeof(int));
    if (!count) { PyErr_NoMemory(); goto done; }
    for (int e = 0; e < nnz; e++) count[ci[e] + 1]++;
    for (int r = 0; r < n_rows; r++) count[r + 1] += count[r];
    lp->nnz_cap = nnz ? nnz : 1;
    lp->rind = malloc(lp->nnz_cap * sizeof(int));
    lp->rval = malloc(lp->nnz_cap * sizeof(double));
    if (!lp->rind || !lp->rval) { free(count); PyErr_NoMemory(); goto done; }
    memcpy(lp->rstart, count, (n_rows + 1) * sizeof(int));
    for (int j = 0; j < n; j++)
        for (int e = cs[j]; e < cs[j + 1]; e++) {
            int at = count[ci[e]]++;
            lp->rind[at] = j;
            lp->rval[at] = cv[e];
        }
    free(count);
    lp->nnz = nnz;
    lp->m = n_rows;
    for (int r = 0; r < n_rows; r++) lp->b[r] = 1.0;
    lp->csc_dirty = 1;
    if (build_csc(lp) < 0) { PyErr_NoMemory(); goto done; }
    slack_basis(lp);
    for (int j = 0; j < n; j++) lp->x[j] = lp->status[j] == AT_HI ? 1.0 : 0.0;
    rc = 0;
done:
    PyBuffer_Release(&gain); PyBuffer_Release(&starts); PyBuffer_Release(&index);
    PyBuffer_Release(&values);
    return rc;
}

static PyObject *Lp_add_row(Lp *lp, PyObject *args) {
    PyObject *o_cols, *o_vals;
    double rhs;
    if (!PyArg_ParseTuple(args, "OOd", &o_cols, &o_vals, &rhs)) return NULL;
    Py_buffer cols, vals;
    if (get_buf(o_cols, &cols, "i", -1, 0, "cols") < 0) return NULL;
    int len = (int)(cols.len / cols.itemsize);
    if (get_buf(o_vals, &vals, "d", len, 0, "coefs") < 0) { PyBuffer_Release(&cols); return NULL; }
    const int *c = cols.buf;
    for (int e = 0; e < len; e++)
        if (c[e] < 0 || c[e] >= lp->n) {
            PyErr_Format(PyExc_ValueError, "cols: column %d out of range [0, %d)", c[e], lp->n);
            PyBuffer_Release(&cols); PyBuffer_Release(&vals);
            return NULL;
        }
    int rc = append_row(lp, c, vals.buf, len, rhs);
    PyBuffer_Release(&cols); PyBuffer_Release(&vals);
    if (rc < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Lp_set_gain(Lp *lp, PyObject *args) {
    PyObject *o;
    if (!PyArg_ParseTuple(args, "O", &o)) return NULL;
    Py_buffer g;
    if (get_buf(o, &g, "d", lp->n, 0, "gain") < 0) return NULL;
    const double *gv = g.buf;
    for (int j = 0; j < lp->n; j++) {
        if (gv[j] < 0) {
            PyBuffer_Release(&g);
            PyErr_SetString(PyExc_ValueError, "gain: must be >= 0 (the all-slack start)");
            return NULL;
        }
        lp->cost[j] = -gv[j];
    }
    PyBuffer_Release(&g);
    /* the old basis need not be dual feasible for the new costs: start from the slacks
     * (and so may a saved one: drop it) */
    slack_basis(lp);
    lp->saved = 0;
    Py_RETURN_NONE;
}

static PyObject *Lp_solve(Lp *lp, PyObject *args) {
    PyObject *o_lo, *o_hi, *o_x, *o_act, *o_dual;
    double cutoff = -INFINITY;
    if (!PyArg_ParseTuple(args, "OOOOO|d", &o_lo, &o_hi, &o_x, &o_act, &o_dual, &cutoff))
        return NULL;
    Py_buffer lo, hi, x, act, dual;
    if (get_buf(o_lo, &lo, "d", lp->n, 0, "lo") < 0) return NULL;
    if (get_buf(o_hi, &hi, "d", lp->n, 0, "hi") < 0) { PyBuffer_Release(&lo); return NULL; }
    if (get_buf(o_x, &x, "d", lp->n, 1, "x") < 0) {
        PyBuffer_Release(&lo); PyBuffer_Release(&hi);
        return NULL;
    }
    if (get_buf(o_act, &act, "d", lp->m, 1, "activity") < 0) {
        PyBuffer_Release(&lo); PyBuffer_Release(&hi); PyBuffer_Release(&x);
        return NULL;
    }
    if (get_buf(o_dual, &dual, "d", lp->m, 1, "dual") < 0) {
        PyBuffer_Release(&lo); PyBuffer_Release(&hi); PyBuffer_Release(&x); PyBuffer_Release(&act);
        return NULL;
    }
    const double *l = lo.buf, *u = hi.buf;
    int bad = 0;
    for (int j = 0; j < lp->n; j++) {
        if (!(l[j] >= 0.0 && l[j] <= u[j] && u[j] <= 1.0)) bad = 1;
        lp->lo[j] = l[j];
        lp->hi[j] = u[j];
    }
    int status;
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "bounds: need 0 <= lo <= hi <= 1");
        status = -2;
    } else if (build_csc(lp) < 0) {
        status = -1;
    } else {
        status = 0;
        if (lp->fresh || lp->updates >= REFACTOR_EVERY) {
            if (fresh_start(lp) < 0) status = -1;
            lp->fresh = 0;
        } else {
            place_nonbasic(lp);
            compute_primal(lp);
        }
        if (status == 0) {
            Py_BEGIN_ALLOW_THREADS
            status = dual_simplex(lp, cutoff);
            Py_END_ALLOW_THREADS
        }
        lp->total_iterations += lp->iterations;
        if (status == OK || status == CUTOFF) {
            double *xo = x.buf, *ao = act.buf, *yo = dual.buf;
            for (int j = 0; j < lp->n; j++) xo[j] = lp->x[j];
            for (int r = 0; r < lp->m; r++) ao[r] = lp->b[r] - (lp->r1pos[r] >= 0 ? 0.0 : lp->x[lp->n + r]);
            compute_y(lp, yo);
            for (int r = 0; r < lp->m; r++) yo[r] = -yo[r]; /* max form */
        } else if (status > 0) {
            /* leave a clean state for the next call */
            slack_basis(lp);
        }
    }
    PyBuffer_Release(&lo); PyBuffer_Release(&hi); PyBuffer_Release(&x); PyBuffer_Release(&act);
    PyBuffer_Release(&dual);
    if (status == -1) return PyErr_NoMemory();
    if (status == -2) return NULL;
    return PyLong_FromLong(status);
}

/* Save the current basis (after an optimal solve) for restore_basis. */
static PyObject *Lp_save_basis(Lp *lp, PyObject *noargs) {
    (void)noargs;
    int k = lp->k, nv = lp->n + lp->m;
    size_t kk = (size_t)(k ? k : 1);
    int *S = realloc(lp->saved_S, kk * sizeof(int));
    if (S) lp->saved_S = S;
    int *R1 = realloc(lp->saved_R1, kk * sizeof(int));
    if (R1) lp->saved_R1 = R1;
    signed char *st = realloc(lp->saved_status, (size_t)(nv ? nv : 1));
    if (st) lp->saved_status = st;
    double *W = realloc(lp->saved_W, kk * kk * sizeof(double));
    if (W) lp->saved_W = W;
    if (!S || !R1 || !st || !W) {
        lp->saved = 0;
        return PyErr_NoMemory();
    }
    memcpy(S, lp->S, k * sizeof(int));
    memcpy(R1, lp->R1, k * sizeof(int));
    memcpy(st, lp->status, nv);
    for (int i = 0; i < k; i++) memcpy(W + (size_t)i * k, &WAT(lp, i, 0), k * sizeof(double));
    lp->saved = 1;
    lp->saved_m = lp->m;
    lp->saved_k = k;
    lp->saved_updates = lp->updates;
    Py_RETURN_NONE;
}

/* Make the saved basis current again; the slacks of rows added since are basic (as when
 * they were added), so the kernel W is unchanged. The reduced costs are recomputed from
 * the current costs; a new objective (set_gain) drops the saved basis. */
static PyObject *Lp_restore_basis(Lp *lp, PyObject *noargs) {
    (void)noargs;
    if (!lp->saved) Py_RETURN_FALSE;
    int k = lp->saved_k, n = lp->n;
    if (reserve_kernel(lp, k) < 0 || build_csc(lp) < 0) return PyErr_NoMemory();
    for (int j = 0; j < n; j++) lp->spos[j] = -1;
    for (int r = 0; r < lp->m; r++) lp->r1pos[r] = -1;
    memcpy(lp->status, lp->saved_status, n + lp->saved_m);
    for (int r = lp->saved_m; r < lp->m; r++) lp->status[n + r] = BASIC;
    lp->k = k;
    for (int i = 0; i < k; i++) {
        lp->S[i] = lp->saved_S[i];
        lp->spos[lp->S[i]] = i;
        lp->R1[i] = lp->saved_R1[i];
        lp->r1pos[lp->R1[i]] = i;
        memcpy(&WAT(lp, i, 0), lp->saved_W + (size_t)i * k, k * sizeof(double));
    }
    lp->updates = lp->saved_updates;
    lp->fresh = 0;
    compute_duals(lp);
    Py_RETURN_TRUE;
}

/* snapshot() -> bytes: the current basis (after an optimal solve), for restore(). Layout:
 * int32 m, k, updates; int32 S[k], R1[k]; int8 status[n + m]; double W[k * k]. */
static PyObject *Lp_snapshot(Lp *lp, PyObject *noargs) {
    (void)noargs;
    int k = lp->k, nv = lp->n + lp->m;
    Py_ssize_t size = 3 * 4 + (Py_ssize_t)k * 8 + nv + (Py_ssize_t)k * k * 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) return NULL;
    char *p = PyBytes_AS_STRING(out);
    int32_t head[3] = {lp->m, k, lp->updates};
    memcpy(p, head, sizeof head);
    p += sizeof head;
    for (int i = 0; i < k; i++, p += 4) memcpy(p, &lp->S[i], 4);
    for (int i = 0; i < k; i++, p += 4) memcpy(p, &lp->R1[i], 4);
    memcpy(p, lp->status, nv);
    p += nv;
    /* W after the status bytes: copied through memcpy (no alignment assumed) */
    for (int i = 0; i < k; i++, p += (size_t)k * 8) memcpy(p, &WAT(lp, i, 0), (size_t)k * 8);
    return out;
}

/* restore(snapshot): make a snapshot's basis current; the slacks of rows added since are
 * basic (as when they were added), the reduced costs recomputed. */
static PyObject *Lp_restore(Lp *lp, PyObject *args) {
    const char *p;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "y#", &p, &size)) return NULL;
    int32_t head[3];
    if (size < (Py_ssize_t)sizeof head) goto bad;
    memcpy(head, p, sizeof head);
    int m0 = head[0], k = head[1], n = lp->n;
    if (m0 < 0 || m0 > lp->m || k < 0 || k > m0 ||
        size != 3 * 4 + (Py_ssize_t)k * 8 + n + m0 + (Py_ssize_t)k * k * 8)
        goto bad;
    p += sizeof head;
    if (reserve_kernel(lp, k) < 0 || build_csc(lp) < 0) return PyErr_NoMemory();
    for (int j = 0; j < n; j++) lp->spos[j] = -1;
    for (int r = 0; r < lp->m; r++) lp->r1pos[r] = -1;
    lp->k = k;
    for (int i = 0; i < k; i++, p += 4) memcpy(&lp->S[i], p, 4);
    for (int i = 0; i < k; i++, p += 4) memcpy(&lp->R1[i], p, 4);
    for (int i = 0; i < k; i++) {
        if (lp->S[i] < 0 || lp->S[i] >= n || lp->R1[i] < 0 || lp->R1[i] >= m0) {
            slack_basis(lp);
            goto bad;
        }
        lp->spos[lp->S[i]] = i;
        lp->r1pos[lp->R1[i]] = i;
    }
    memcpy(lp->status, p, n + m0);
    p += n + m0;
    for (int r = m0; r < lp->m; r++) lp->status[n + r] = BASIC;
    for (int i = 0; i < k; i++, p += (size_t)k * 8) memcpy(&WAT(lp, i, 0), p, (size_t)k * 8);
    lp->updates = head[2];
    lp->fresh = 0;
    compute_duals(lp);
    Py_RETURN_NONE;
bad:
    PyErr_SetString(PyExc_ValueError, "restore: not a snapshot of this LP");
    return NULL;
}

static PyObject *Lp_get_m(Lp *lp, void *c) { (void)c; return PyLong_FromLong(lp->m); }
static PyObject *Lp_get_n(Lp *lp, void *c) { (void)c; return PyLong_FromLong(lp->n); }
static PyObject *Lp_get_it(Lp *lp, void *c) { (void)c; return PyLong_FromLong(lp->iterations); }
static PyObject *Lp_get_tot(Lp *lp, void *c) { (void)c; return PyLong_FromLong(lp->total_iterations); }
static PyObject *Lp_get_k(Lp *lp, void *c) { (void)c; return PyLong_FromLong(lp->k); }

static PyGetSetDef Lp_getset[] = {
    {"num_row", (getter)Lp_get_m, NULL, "rows (base rows and added cuts)", NULL},
    {"num_col", (getter)Lp_get_n, NULL, "columns", NULL},
    {"iterations", (getter)Lp_get_it, NULL, "simplex pivots of the last solve", NULL},
    {"total_iterations", (getter)Lp_get_tot, NULL, "simplex pivots of all solves", NULL},
    {"basic_columns", (getter)Lp_get_k, NULL, "columns in the current basis", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Lp_methods[] = {
    {"add_row", (PyCFunction)Lp_add_row, METH_VARARGS,
     "add_row(cols: int32 array, coefs: float64 array, rhs: float): a row coefs.x[cols] <= rhs"},
    {"set_gain", (PyCFunction)Lp_set_gain, METH_VARARGS,
     "set_gain(gain: float64 array >= 0): new objective; the next solve starts from the slacks"},
    {"save_basis", (PyCFunction)Lp_save_basis, METH_NOARGS,
     "save_basis(): remember the current basis (call after an optimal solve)"},
    {"snapshot", (PyCFunction)Lp_snapshot, METH_NOARGS,
     "snapshot() -> bytes: the current basis (call after an optimal solve), for restore()"},
    {"restore", (PyCFunction)Lp_restore, METH_VARARGS,
     "restore(snapshot): make that basis current; the next solve starts from it"},
    {"restore_basis", (PyCFunction)Lp_restore_basis, METH_NOARGS,
     "restore_basis() -> bool: make the saved basis current (False: none saved, or the "
     "objective changed since); the next solve starts from it"},
    {"solve", (PyCFunction)Lp_solve, METH_VARARGS,
     "solve(lo, hi, x_out, activity_out, dual_out[, cutoff]) -> status (0 optimal, 1 "
     "iteration limit, 2 numerical trouble, 3 infeasible, 4 stopped at a dual-feasible basis "
     "whose objective is <= cutoff); the outputs are written only when 0 or 4"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "themis.mechanism.solvers._simplex.Lp",
    .tp_doc = "Lp(n_rows, starts, index, values, gain): max gain.x, A x <= 1 (CSC A), 0 <= x <= 1",
    .tp_basicsize = sizeof(Lp),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lp_init,
    .tp_dealloc = (destructor)Lp_dealloc,
    .tp_methods = Lp_methods,
    .tp_getset = Lp_getset,
};

/* weak_duality_bound(y, objective, starts, index, cut_rows, cut_cols, cut_coefs, rhs, lo,
 * hi): for row duals y >= 0 of max objective.x s.t. A x <= rhs, lo <= x <= hi (A: the
 * 0/1 base rows in CSC form, starts/index, then the cut rows as triplets), the bound
 * y.rhs + sum_c (hi_c <= 0 ? 0 : lo_c >= 1 ? d_c : max(0, d_c)), d = objective - A^T y.
 * Valid for any y >= 0: lpbb's certified bound (lpbb._Relaxation._certified_py is the
 * reference). Independent of the Lp object: it reads the caller's copy of the rows.
 * Optional 11th argument: a float64 array of n that receives the reduced gains d. */
static int get_vec(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t len, const char *name) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = b->format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    int ok = strcmp(f, fmt) == 0 || (fmt[0] == 'q' && strcmp(f, "l") == 0 && b->itemsize == 8);
    if (!ok || (len >= 0 && b->len / b->itemsize != len)) {
        PyErr_Format(PyExc_ValueError, "%s: wrong dtype or length", name);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static PyObject *weak_duality_bound(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[10], *o_d = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO|O", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o_d))
        return NULL;
    Py_buffer b[10], bd;
    int got = 0, got_d = 0;
    PyObject *result = NULL;
    /* y, objective, starts, index, cut_rows, cut_cols, cut_coefs, rhs, lo, hi */
    static const char *fmt[10] = {"d", "d", "i", "i", "q", "q", "d", "d", "d", "d"};
    static const char *name[10] = {"y", "objective", "starts", "index", "cut_rows", "cut_cols",
                                   "cut_coefs", "rhs", "lo", "hi"};
    for (; got < 10; got++)
        if (get_vec(o[got], &b[got], fmt[got], -1, name[got]) < 0) goto done;
    Py_ssize_t m = b[0].len / 8, n = b[1].len / 8, nnz = b[3].len / 4, nc = b[4].len / 8;
    if (b[2].len / 4 != n + 1 || b[5].len / 8 != nc || b[6].len / 8 != nc || b[7].len / 8 != m ||
        b[8].len / 8 != n || b[9].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "weak_duality_bound: inconsistent lengths");
        goto done;
    }
    const double *y = b[0].buf, *obj = b[1].buf, *coef = b[6].buf, *rhs = b[7].buf;
    const double *lo = b[8].buf, *hi = b[9].buf;
    const int32_t *starts = b[2].buf, *index = b[3].buf;
    const int64_t *crow = b[4].buf, *ccol = b[5].buf;
    double *d;
    if (o_d != NULL && o_d != Py_None) {
        if (get_buf(o_d, &bd, "d", n, 1, "reduced") < 0) goto done;
        got_d = 1;
        d = bd.buf;
    } else if (!(d = malloc((n ? (size_t)n : 1) * sizeof(double)))) {
        PyErr_NoMemory();
        goto done;
    }
    int bad = 0;
    for (Py_ssize_t c = 0; c < n && !bad; c++) {
        double s = 0.0;
        if (starts[c] < 0 || starts[c + 1] < starts[c] || starts[c + 1] > nnz) bad = 1;
        for (int32_t k = starts[c]; k < starts[c + 1] && !bad; k++) {
            if (index[k] < 0 || index[k] >= m) bad = 1;
            else s += y[index[k]];
        }
        d[c] = obj[c] - s;
    }
    for (Py_ssize_t k = 0; k < nc && !bad; k++) {
        if (crow[k] < 0 || crow[k] >= m || ccol[k] < 0 || ccol[k] >= n) bad = 1;
        else d[ccol[k]] -= coef[k] * y[crow[k]];
    }
    if (bad) {
        if (!got_d) free(d);
        PyErr_SetString(PyExc_ValueError, "weak_duality_bound: an index out of range");
        goto done;
    }
    double bound = 0.0;
    for (Py_ssize_t r = 0; r < m; r++) bound += y[r] * rhs[r];
    for (Py_ssize_t c = 0; c < n; c++) {
        if (hi[c] <= 0.0) continue;
        bound += lo[c] >= 1.0 ? d[c] : (d[c] > 0.0 ? d[c] : 0.0);
    }
    if (!got_d) free(d);
    result = PyFloat_FromDouble(bound);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    if (got_d) PyBuffer_Release(&bd);
    return result;
}

/* packing_structure(masks, width, app_of, n_apps, n_gpus) -> (starts, index, n_rows,
 * row_starts, members): the packing LP's sparse structure (PackingLp in highs.py; its numpy
 * reference is packing_structure_py there). masks: bytes, the columns' GPU bitsets of
 * ``width`` little-endian bytes each; app_of: int32, the app of each column, non-decreasing.
 * Rows: one per app, then one per GPU named by columns of two or more apps, in GPU order,
 * but for GPUs whose row is implied by another's: GPU g's row is left out when every
 * column naming g also names a GPU h whose columns are not all g's (a strict superset:
 * g's row is implied by h's, x >= 0) or are exactly g's with h < g (equal rows, the first
 * kept).
 * A column's entries: its app row, then the rows of its shared GPUs in GPU order. Returned
 * as bytearrays of int32: column starts (n + 1), the row of each entry, row starts
 * (n_rows + 1) and each row's columns in ascending order. */
static PyObject *packing_structure(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer mb, ab;
    PyObject *apps;
    Py_ssize_t width, n_apps, n_gpus;
    if (!PyArg_ParseTuple(args, "y*nOnn", &mb, &width, &apps, &n_apps, &n_gpus)) return NULL;
    PyObject *result = NULL;
    int *last = NULL, *named = NULL, *gpu_row = NULL, *rcount = NULL, *fill = NULL;
    unsigned char *within = NULL; /* per GPU: the GPUs named by every column naming it */
    PyObject *starts_o = NULL, *index_o = NULL, *rstarts_o = NULL, *members_o = NULL;
    if (get_vec(apps, &ab, "i", -1, "app_of") < 0) {
        PyBuffer_Release(&mb);
        return NULL;
    }
    Py_ssize_t n = ab.len / 4;
    const int32_t *app_of = ab.buf;
    const unsigned char *bits = mb.buf;
    if (width < 1 || n_apps < 0 || n_gpus < 0 || width * 8 < n_gpus || mb.len != n * width) {
        PyErr_SetString(PyExc_ValueError, "packing_structure: inconsistent sizes");
        goto done;
    }
    for (Py_ssize_t c = 0; c < n; c++) {
        if (app_of[c] < 0 || app_of[c] >= n_apps || (c && app_of[c] < app_of[c - 1])) {
            PyErr_SetString(PyExc_ValueError,
                            "packing_structure: app_of must be non-decreasing app indices");
            goto done;
        }
    }
    size_t g_cap = n_gpus ? (size_t)n_gpus : 1;
    last = malloc(g_cap * sizeof(int));
    named = calloc(g_cap, sizeof(int));
    gpu_row = malloc(g_cap * sizeof(int));
    within = malloc(g_cap * (size_t)width);
    if (!last || !named || !gpu_row || !within) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t g = 0; g < n_gpus; g++) last[g] = -1;
    memset(within, 0xff, g_cap * (size_t)width);
    /* pass 1: how many apps name each GPU (columns come grouped by app) */
    for (Py_ssize_t c = 0; c < n; c++) {
        const unsigned char *row = bits + c * width;
        for (Py_ssize_t byte = 0; byte < width; byte++) {
            unsigned v = row[byte];
            while (v) {
                Py_ssize_t g = byte * 8 + __builtin_ctz(v);
                v &= v - 1;
                if (g >= n_gpus) {
                    PyErr_SetString(PyExc_ValueError, "packing_structure: a GPU bit >= n_gpus");
                    goto done;
                }
                if (last[g] != app_of[c]) {
                    last[g] = app_of[c];
                    named[g]++;
                }
                unsigned char *w = within + g * width;
                for (Py_ssize_t q = 0; q < width; q++) w[q] &= row[q];
            }
        }
    }
    Py_ssize_t m = n_apps;
    for (Py_ssize_t g = 0; g < n_gpus; g++) {
        int implied = 0;
        const unsigned char *w = within + g * width;
        for (Py_ssize_t h = 0; named[g] > 1 && h < n_gpus && !implied; h++) {
            if (h == g || !(w[h >> 3] & (1u << (h & 7)))) continue;
            /* columns(g) within columns(h); equal when g is named by every column of h */
            int equal = (within[h * width + (g >> 3)] >> (g & 7)) & 1;
            implied = !equal || h < g;
        }
        gpu_row[g] = named[g] > 1 && !implied ? (int)m++ : -1;
    }
    /* pass 2: the columns' entries (CSC) and the rows' sizes */
    Py_ssize_t nnz = n;
    for (Py_ssize_t c = 0; c < n; c++) {
        const unsigned char *row = bits + c * width;
        for (Py_ssize_t byte = 0; byte < width; byte++)
            for (unsigned v = row[byte]; v; v &= v - 1)
                if (gpu_row[byte * 8 + __builtin_ctz(v)] >= 0) nnz++;
    }
    if (nnz > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "packing_structure: too many entries");
        goto done;
    }
    starts_o = PyByteArray_FromStringAndSize(NULL, (n + 1) * 4);
    index_o = PyByteArray_FromStringAndSize(NULL, (nnz ? nnz : 0) * 4);
    rstarts_o = PyByteArray_FromStringAndSize(NULL, (m + 1) * 4);
    members_o = PyByteArray_FromStringAndSize(NULL, (nnz ? nnz : 0) * 4);
    rcount = calloc((size_t)m + 1, sizeof(int));
    fill = malloc(((size_t)m + 1) * sizeof(int));
    if (!starts_o || !index_o || !rstarts_o || !members_o || !rcount || !fill) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    int32_t *starts = (int32_t *)PyByteArray_AS_STRING(starts_o);
    int32_t *index = (int32_t *)PyByteArray_AS_STRING(index_o);
    int32_t *rstarts = (int32_t *)PyByteArray_AS_STRING(rstarts_o);
    int32_t *members = (int32_t *)PyByteArray_AS_STRING(members_o);
    int32_t k = 0;
    for (Py_ssize_t c = 0; c < n; c++) {
        starts[c] = k;
        index[k++] = app_of[c];
        rcount[app_of[c]]++;
        const unsigned char *row = bits + c * width;
        for (Py_ssize_t byte = 0; byte < width; byte++)
            for (unsigned v = row[byte]; v; v &= v - 1) {
                int r = gpu_row[byte * 8 + __builtin_ctz(v)];
                if (r >= 0) {
                    index[k++] = r;
                    rcount[r]++;
                }
            }
    }
    starts[n] = k;
    /* the rows (CSR): columns in ascending order, as they come */
    rstarts[0] = 0;
    for (Py_ssize_t r = 0; r < m; r++) {
        rstarts[r + 1] = rstarts[r] + rcount[r];
        fill[r] = rstarts[r];
    }
    for (Py_ssize_t c = 0; c < n; c++)
        for (int32_t e = starts[c]; e < starts[c + 1]; e++) members[fill[index[e]]++] = (int32_t)c;
    result = Py_BuildValue("OOnOO", starts_o, index_o, m, rstarts_o, members_o);
done:
    Py_XDECREF(starts_o);
    Py_XDECREF(index_o);
    Py_XDECREF(rstarts_o);
    Py_XDECREF(members_o);
    free(last);
    free(named);
    free(gpu_row);
    free(within);
    free(rcount);
    free(fill);
    PyBuffer_Release(&ab);
    PyBuffer_Release(&mb);
    return result;
}

static PyMethodDef module_methods[] = {
    {"weak_duality_bound", weak_duality_bound, METH_VARARGS,
     "weak_duality_bound(y, objective, starts, index, cut_rows, cut_cols, cut_coefs, rhs, lo, "
     "hi[, reduced_out]) -> float"},
    {"packing_structure", packing_structure, METH_VARARGS,
     "packing_structure(masks, width, app_of, n_apps, n_gpus) -> (starts, index, n_rows, "
     "row_starts, members)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_simplex",
    "Warm-started bounded dual simplex for the packing LP (see lp_engines.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__simplex(void) {
    if (PyType_Ready(&LpType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (!mod) return NULL;
    Py_INCREF(&LpType);
    if (PyModule_AddObject(mod, "Lp", (PyObject *)&LpType) < 0) {
        Py_DECREF(&LpType);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
