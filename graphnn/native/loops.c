/* graphnn's native loops: chains of float32 arithmetic that NumPy would run as one pass per
 * operation, run here as one loop per chain.
 *
 * Each function performs exactly the IEEE operations of the NumPy code it stands in for, in the
 * same order and in float32, so its results equal that code's bit for bit (NaN where it gives
 * NaN: the compiler may swap the operands of + and *, and of two NaNs x86 keeps the first's
 * payload): it is built with floating-point contraction off (no fused multiply-add) and
 * without fast-math, and it only adds, subtracts, multiplies, divides, compares and copies. Transcendental functions (exp) and
 * sums, whose bits depend on the implementation and the order of additions, stay with NumPy
 * and BLAS: the Python callers run them between these loops. Arrays are C-contiguous float32
 * unless said otherwise; `n`, `rows` and `cols` count elements.
 *
 * The source holds no data of any user: graphnn builds it as it is (graphnn/native/library.py).
 */
#include <math.h>  /* copysignf, fabsf, INFINITY */
#include <stddef.h>
#include <stdint.h>
#include <string.h>  /* memcpy */

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
/* an AVX2 copy of each loop beside the baseline one, picked by the CPU at load time */
#define VECTOR_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_LOOP
#endif

/* ---- erf in float32 (graphnn/ir/ops/erf.py), and the exact GELU with its derivative
 * (graphnn/ir/ops/gelu.py) --------------------------------------------------------------------
 * `coef` holds erf.py's float32 coefficients rounded to float32, each highest degree first:
 * NEAR32 (6), MID32 (7), FAR32 (15), then ERF1's high and low parts. With t = s * s, erf(s) is
 * the first piece, s + s * near(t), where t < `low` (NaN included); the middle piece,
 * erf1 + v * mid(v) with v = |s| - 1, where t < `high`; else the outer one,
 * 1 - far(min(|s|, 4) - 2.625); the last two with s's sign. Each is computed as erf.py's NumPy
 * code computes it, operation by operation. Loops run over chunks of CHUNK elements: the first
 * piece for all, the others only in chunks holding such elements. */
#define NEAR_TERMS 6
#define MID_TERMS 7
#define FAR_TERMS 15
#define CHUNK 256

/* Horner's rule as erf._polynomial: u * c[0], then (+ c[k]) * u, then + c[terms - 1]. */
static inline float horner(const float *c, int terms, float u) {
    float p = u * c[0];
    for (int k = 1; k < terms - 1; k++) {
        p = p + c[k];
        p = p * u;
    }
    return p + c[terms - 1];
}

static inline float erf_near(const float *coef, float s, float t) {
    float e = horner(coef, NEAR_TERMS, t) * s;
    return e + s;
}

/* The middle or outer piece's erf of s (|s| >= 3/4), with s's sign. */
static inline float erf_other(const float *coef, float s, float t, float high) {
    float a = fabsf(s);
    float v = a - 1.0f;
    float middle = horner(coef + NEAR_TERMS, MID_TERMS, v) * v;
    middle = middle + coef[NEAR_TERMS + MID_TERMS + FAR_TERMS + 1];
    middle = middle + coef[NEAR_TERMS + MID_TERMS + FAR_TERMS];
    float w = a < 4.0f ? a : 4.0f;
    w = w - 2.625f;
    float outer = 1.0f - horner(coef + NEAR_TERMS + MID_TERMS, FAR_TERMS, w);
    float z = t < high ? middle : outer;
    return copysignf(z, s);  /* z >= 0: erf.py's sign-bit or */
}

/* e = erf(x) */
VECTOR_LOOP
void erf_f32(const float *x, float *e, ptrdiff_t n, const float *coef, float low, float high) {
    for (ptrdiff_t start = 0; start < n; start += CHUNK) {
        ptrdiff_t stop = start + CHUNK < n ? start + CHUNK : n;
        int others = 0;
        for (ptrdiff_t i = start; i < stop; i++) {
            float s = x[i], t = s * s;
            e[i] = erf_near(coef, s, t);
            others |= t >= low;
        }
        if (!others)
            continue;
        for (ptrdiff_t i = start; i < stop; i++) {
            float s = x[i], t = s * s;
            float z = erf_other(coef, s, t, high);
            e[i] = t >= low ? z : e[i];
        }
    }
}

/* The GELU's first loop, with s = x / sqrt2, phi = erf(s) + 1: d = phi * 0.5 and
 * y = log_pdf0 - t (the exponent, which the caller exponentiates in place). */
VECTOR_LOOP
void gelu_start_f32(const float *x, float *y, float *d, ptrdiff_t n, float sqrt2,
                    float log_pdf0, const float *coef, float low, float high) {
    for (ptrdiff_t start = 0; start < n; start += CHUNK) {
        ptrdiff_t stop = start + CHUNK < n ? start + CHUNK : n;
        int others = 0;
        for (ptrdiff_t i = start; i < stop; i++) {
            float s = x[i] / sqrt2, t = s * s;
            float phi = erf_near(coef, s, t) + 1.0f;
            d[i] = phi * 0.5f;
            y[i] = log_pdf0 - t;
            others |= t >= low;
        }
        if (!others)
            continue;
        for (ptrdiff_t i = start; i < stop; i++) {
            float s = x[i] / sqrt2, t = s * s;
            float phi = erf_other(coef, s, t, high) + 1.0f;
            d[i] = t >= low ? phi * 0.5f : d[i];
        }
    }
}

/* The GELU's second loop, after y = exp(y): y = (x * 0.5) * phi (phi = 2 d, exact: phi is 0
 * or at least 2^-24) and d = d + y * x. */
VECTOR_LOOP
void gelu_finish_f32(const float *x, float *y, float *d, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; i++) {
        float pdf = y[i] * x[i];
        float half = x[i] * 0.5f;
        y[i] = half * (d[i] * 2.0f);
        d[i] = d[i] + pdf;
    }
}

/* ---- layer normalization's row loops (graphnn/ir/ops/normalization.py) ----------------------
 * A (rows, cols) matrix; per-row values are arrays of `rows`, per-column ones of `cols`. */

/* out = x - mean[row] */
VECTOR_LOOP
void sub_rows_f32(const float *x, const float *mean, float *out, ptrdiff_t rows,
                  ptrdiff_t cols) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        float m = mean[r];
        for (ptrdiff_t c = 0; c < cols; c++)
            o[c] = xr[c] - m;
    }
}

/* normalized = centered * rstd[row] (in place); with a weight, y = normalized * weight[col]
 * (+ bias[col] with a bias; `bias` may be NULL). */
VECTOR_LOOP
void normalize_rows_f32(float *centered, const float *rstd, const float *weight,
                        const float *bias, float *y, ptrdiff_t rows, ptrdiff_t cols) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        float *n = centered + r * cols;
        float scale = rstd[r];
        for (ptrdiff_t c = 0; c < cols; c++)
            n[c] = n[c] * scale;
        if (weight == NULL)
            continue;
        float *yr = y + r * cols;
        if (bias == NULL) {
            for (ptrdiff_t c = 0; c < cols; c++)
                yr[c] = n[c] * weight[c];
        } else {
            for (ptrdiff_t c = 0; c < cols; c++) {
                float v = n[c] * weight[c];
                yr[c] = v + bias[c];
            }
        }
    }
}

/* The input gradient: dx = ((h - normalized * projection[row]) - mean[row]) * scale[row], with
 * h = g * weight[col] (h = g where `weight` is NULL). */
VECTOR_LOOP
void layer_norm_dx_f32(const float *g, const float *normalized, const float *weight,
                       const float *projection, const float *mean, const float *scale,
                       float *dx, ptrdiff_t rows, ptrdiff_t cols) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        const float *gr = g + r * cols, *nr = normalized + r * cols;
        float *o = dx + r * cols;
        float p = projection[r], m = mean[r], s = scale[r];
        if (weight == NULL) {
            for (ptrdiff_t c = 0; c < cols; c++) {
                float v = gr[c] - nr[c] * p;
                v = v - m;
                o[c] = v * s;
            }
        } else {
            for (ptrdiff_t c = 0; c < cols; c++) {
                float h = gr[c] * weight[c];
                float v = h - nr[c] * p;
                v = v - m;
                o[c] = v * s;
            }
        }
    }
}

/* ---- the softmax's row loops (graphnn/codegen/numpy/softmax.py) ----------------------------
 * Rows of `cols` along the last axis. */
typedef float lanes8 __attribute__((vector_size(32)));
typedef int32_t mask8 __attribute__((vector_size(32)));

/* out = v - max(v) by rows, v = where(keep, x, fill) where `keep` is given (bytes 0/1, rows
 * of `cols`, broadcast along the leading rows: row r reads keep row (first + r) % keep_rows),
 * else v = x. The maximum is a row's first NaN where it holds one; which zero it picks from a
 * row holding +0 and -0 as its maximum may differ from NumPy's, which v - max cannot show once
 * exponentiated (exp(+-0) = 1). */
VECTOR_LOOP
void shift_rows_f32(const float *x, const uint8_t *keep, ptrdiff_t keep_rows, ptrdiff_t first,
                    float fill, float *out, ptrdiff_t rows, ptrdiff_t cols) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        if (keep != NULL) {
            const uint8_t *k = keep + ((first + r) % keep_rows) * cols;
            for (ptrdiff_t c = 0; c < cols; c++)
                o[c] = k[c] ? xr[c] : fill;
            xr = o;
        }
        /* eight running maxima at a time (GCC/clang vector extensions: compare and blend) */
        lanes8 lane = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                       -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        mask8 nan8 = {0, 0, 0, 0, 0, 0, 0, 0};
        ptrdiff_t c = 0;
        for (; c + 8 <= cols; c += 8) {
            lanes8 v;
            memcpy(&v, xr + c, sizeof v);
            mask8 greater = v > lane;
            lane = (lanes8)(((mask8)v & greater) | ((mask8)lane & ~greater));
            nan8 |= v != v;
        }
        float m = -INFINITY;
        int nan = 0;
        for (int j = 0; j < 8; j++) {
            m = lane[j] > m ? lane[j] : m;
            nan |= nan8[j] != 0;
        }
        for (; c < cols; c++) {
            float v = xr[c];
            m = v > m ? v : m;
            nan |= v != v;
        }
        if (nan) {  /* the row's first NaN, as a sequential np.maximum keeps it */
            for (c = 0; xr[c] == xr[c]; c++)
                ;
            m = xr[c];
        }
        for (c = 0; c < cols; c++)
            o[c] = xr[c] - m;
    }
}

/* out = out / total[row] */
VECTOR_LOOP
void divide_rows_f32(float *out, const float *total, ptrdiff_t rows, ptrdiff_t cols) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        float *o = out + r * cols;
        float t = total[r];
        for (ptrdiff_t c = 0; c < cols; c++)
            o[c] = o[c] / t;
    }
}

/* ---- a GEMM's epilogue (graphnn/codegen/numpy/common.py) ------------------------------------ */

/* out = out + bias[col], then + residual where `residual` is given (not NULL). */
VECTOR_LOOP
void add_bias_rows_f32(float *out, const float *bias, const float *residual, ptrdiff_t rows,
                       ptrdiff_t cols) {
    for (ptrdiff_t r = 0; r < rows; r++) {
        float *o = out + r * cols;
        if (residual == NULL) {
            for (ptrdiff_t c = 0; c < cols; c++)
                o[c] = o[c] + bias[c];
        } else {
            const float *res = residual + r * cols;
            for (ptrdiff_t c = 0; c < cols; c++) {
                float v = o[c] + bias[c];
                o[c] = v + res[c];
            }
        }
    }
}
