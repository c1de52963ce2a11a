/* digits.h - the examples' data: scikit-learn's 8x8 digits as
   examples/digits.py writes them (examples/digits.bin), split into a
   training and a held-out set by a fixed shuffle (NumPy's RandomState), or
   a synthetic stand-in of the same shape when the file is missing. */
#ifndef EXAMPLES_DIGITS_H
#define EXAMPLES_DIGITS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct digits {
    tn_array *xtr, *ytr, *xte, *yte;   /* float32 (n, 64) in [0, 1]; int32 labels */
    int ntr, nte;
    bool real;                         /* false: the synthetic stand-in */
} digits;

/* Reads path; NULL with a message when it is missing or malformed. */
static float *digits_read(const char *path, int *n, int32_t **labels) {
    FILE *f = fopen(path, "rb");
    char magic[4];
    int32_t hd[2];
    if (!f) return NULL;
    float *x = NULL;
    *labels = NULL;
    if (fread(magic, 1, 4, f) == 4 && !memcmp(magic, "TNDG", 4) && fread(hd, sizeof hd[0], 2, f) == 2 && hd[0] > 0 && hd[0] < 1000000 && hd[1] == 64) {
        x = (float *)malloc((size_t)hd[0] * 64 * sizeof *x);
        *labels = (int32_t *)malloc((size_t)hd[0] * sizeof **labels);
        if (!x || !*labels || fread(x, sizeof *x, (size_t)hd[0] * 64, f) != (size_t)hd[0] * 64 || fread(*labels, sizeof **labels, (size_t)hd[0], f) != (size_t)hd[0]) {
            free(x); free(*labels); x = NULL; *labels = NULL;
        }
    }
    fclose(f);
    if (!x) fprintf(stderr, "%s: not a digits file (run /usr/bin/python3 examples/digits.py again)\n", path);
    else *n = hd[0];
    return x;
}

/* 80% to train, 20% held out. required: without the file, say how to get it and return false. */
static bool digits_load(const char *path, bool required, digits *D) {
    int n = 0;
    int32_t *y = NULL;
    float *x = digits_read(path, &n, &y);
    memset(D, 0, sizeof *D);
    D->real = x != NULL;
    tn_random_state *rs = tn_random_state_new(1234);
    if (!x) {
        if (required) {
            printf("%s not found: this example needs scikit-learn's digits.\n"
                   "  apt-get install python3-sklearn && /usr/bin/python3 examples/digits.py\n", path);
            tn_random_state_free(rs);
            return false;
        }
        /* the stand-in: 10 random prototype images, each sample one of them plus noise, clipped to [0, 1] */
        n = 1797;
        x = (float *)malloc((size_t)n * 64 * sizeof *x);
        y = (int32_t *)malloc((size_t)n * sizeof *y);
        tn_array *proto = tn_rs_rand(rs, TN_F32, 2, (int64_t[]){ 10, 64 }), *noise = tn_rs_normal(rs, TN_F32, 2, (int64_t[]){ n, 64 }, 0, 0.35);
        tn_array *lab = tn_rs_randint(rs, TN_I32, 1, (int64_t[]){ n }, 0, 10);
        for (int i = 0; i < n; i++) {
            y[i] = ((const int32_t *)lab->data)[i];
            for (int j = 0; j < 64; j++) {
                float v = ((const float *)proto->data)[y[i] * 64 + j] + ((const float *)noise->data)[i * 64 + j];
                x[i * 64 + j] = v < 0 ? 0 : v > 1 ? 1 : v;
            }
        }
        tn_array_free(proto); tn_array_free(noise); tn_array_free(lab);
    }
    /* a fixed permutation: argsort of uniform draws */
    tn_array *u = tn_rs_rand(rs, TN_F64, 1, (int64_t[]){ n });
    int *perm = (int *)malloc((size_t)n * sizeof *perm);
    for (int i = 0; i < n; i++) perm[i] = i;
    const double *uv = (const double *)u->data;
    for (int i = 1; i < n; i++)            /* insertion sort by u: n is small */
        for (int j = i; j > 0 && uv[perm[j]] < uv[perm[j - 1]]; j--) { int t = perm[j]; perm[j] = perm[j - 1]; perm[j - 1] = t; }
    D->ntr = n * 4 / 5;
    D->nte = n - D->ntr;
    D->xtr = tn_array_empty(TN_F32, 2, (int64_t[]){ D->ntr, 64 });
    D->xte = tn_array_empty(TN_F32, 2, (int64_t[]){ D->nte, 64 });
    D->ytr = tn_array_empty(TN_I32, 1, (int64_t[]){ D->ntr });
    D->yte = tn_array_empty(TN_I32, 1, (int64_t[]){ D->nte });
    for (int i = 0; i < n; i++) {
        bool tr = i < D->ntr;
        int k = tr ? i : i - D->ntr;
        memcpy((float *)(tr ? D->xtr : D->xte)->data + (size_t)k * 64, x + (size_t)perm[i] * 64, 64 * sizeof(float));
        ((int32_t *)(tr ? D->ytr : D->yte)->data)[k] = y[perm[i]];
    }
    tn_array_free(u);
    free(perm); free(x); free(y);
    tn_random_state_free(rs);
    return true;
}

static void digits_free(digits *D) {
    tn_array_free(D->xtr); tn_array_free(D->ytr); tn_array_free(D->xte); tn_array_free(D->yte);
}

/* Rows [lo, hi) of a (n, ...) array: a view, nothing copied. */
static tn_array *rows(const tn_array *a, int lo, int hi) { return tn_array_slice(a, 0, lo, hi, 1); }
#endif
