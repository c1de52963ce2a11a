/* .npy files (tensor.h >>array_files): round trips with NumPy itself, both
   ways (tests/npy_roundtrip.py, run with Debian's python3-numpy: every
   dtype, both byte orders, Fortran order, versions 1.0 to 3.0, 0-d and
   empty arrays, a strided view), round trips through the library alone,
   and the errors by code and words. Without NumPy the NumPy half prints
   SKIP and counts nothing. */
#define _POSIX_C_SOURCE 200809L
#include "tensor.h"
#include "harness.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* v(i) of tests/npy_roundtrip.py, written again here in C */
static double v_of(tn_dtype t, int64_t i) {
    if (t == TN_BOOL) return i % 3 == 0;
    if (t == TN_I32 || t == TN_I64) return (double)((i * 37) % 101 - 50);
    return (double)((i * 37) % 101) / 8.0 - 6.0;
}

static tn_array *make(tn_dtype t, int nd, const int64_t *sh) {
    tn_array *a = tn_array_zeros(t, nd, sh);
    int64_t n = tn_array_size(a), idx[TN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = nd - 1; d >= 0; d--) { idx[d] = r % sh[d]; r /= sh[d]; }
        tn_array_set(a, idx, v_of(t, i));
    }
    return a;
}

/* a's elements in C order are v(0), v(1), ... of dtype t */
static bool holds(const tn_array *a, tn_dtype t, int nd, const int64_t *sh) {
    if (!a || a->dtype != t || a->ndim != nd || !tn_array_is_contiguous(a)) return false;
    for (int d = 0; d < nd; d++) if (a->shape[d] != sh[d]) return false;
    int64_t n = tn_array_size(a), idx[TN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = nd - 1; d >= 0; d--) { idx[d] = r % sh[d]; r /= sh[d]; }
        if (tn_array_get(a, idx) != v_of(t, i)) return false;
    }
    return true;
}

static char dir[64];

static const char *at(const char *name) {
    static char buf[4][160];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static bool have_numpy(void) { return system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

/* The library's own round trip: every dtype, 0-d, empty, a strided view, NaN/inf/-0 bits. */
TEST(test_npy_self_roundtrip) {
    const tn_dtype ts[6] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };
    const int64_t sh[3] = { 2, 3, 4 };
    for (int k = 0; k < 6; k++) {
        tn_array *a = make(ts[k], 3, sh);
        CHECK(tn_save_npy(at("self.npy"), a) == TN_OK, "%s: save %s", tn_dtype_name(ts[k]), tn_last_error());
        tn_array *b = tn_load_npy(at("self.npy"));
        CHECK(holds(b, ts[k], 3, sh), "%s: loaded back", tn_dtype_name(ts[k]));
        tn_array_free(a); tn_array_free(b);
    }
    double specials[6] = { NAN, INFINITY, -INFINITY, -0.0, 5e-324, 1.7976931348623157e308 };
    tn_array *s = tn_array_from_data(TN_F64, 1, (int64_t[]){ 6 }, specials);
    CHECK(tn_save_npy(at("sp.npy"), s) == TN_OK, "specials: %s", tn_last_error());
    tn_array *sb = tn_load_npy(at("sp.npy"));
    CHECK(sb && memcmp(sb->data, specials, sizeof specials) == 0, "NaN, inf, -0, denormal, max: the same bits");
    tn_array_free(s); tn_array_free(sb);
    tn_array *big = make(TN_F32, 2, (int64_t[]){ 6, 5 }), *bt = tn_array_transpose(big, NULL), *view = tn_array_slice(bt, 1, 1, 6, 2);
    CHECK(view && tn_save_npy(at("view.npy"), view) == TN_OK, "view: %s", tn_last_error());
    tn_array *vb = tn_load_npy(at("view.npy"));
    bool same = vb && vb->ndim == 2 && vb->shape[0] == 5 && vb->shape[1] == 3;
    for (int i = 0; same && i < 5; i++) for (int j = 0; j < 3; j++) same = tn_array_get(vb, (int64_t[]){ i, j }) == v_of(TN_F32, (1 + 2 * j) * 5 + i);
    CHECK(same, "a strided view saves its values in C order");
    tn_array_free(big); tn_array_free(bt); tn_array_free(view); tn_array_free(vb);
}

TEST(test_npy_with_numpy) {
    if (!have_numpy()) { TH_SKIP("no NumPy for /usr/bin/python3: apt-get install python3-numpy"); return; }
    /* the library writes, NumPy checks */
    tn_array *a[8] = { make(TN_F32, 2, (int64_t[]){ 3, 4 }), make(TN_F64, 0, NULL), make(TN_I32, 1, (int64_t[]){ 5 }),
                       make(TN_I64, 3, (int64_t[]){ 2, 3, 2 }), make(TN_BOOL, 1, (int64_t[]){ 4 }), make(TN_F16, 2, (int64_t[]){ 2, 2 }),
                       tn_array_zeros(TN_F32, 2, (int64_t[]){ 0, 3 }), NULL };
    tn_array *b = tn_array_zeros(TN_F32, 2, (int64_t[]){ 3, 4 });      /* b[j][i] = v(i*3 + j): its transpose is v in C order */
    for (int i = 0; i < 4; i++) for (int j = 0; j < 3; j++) tn_array_set(b, (int64_t[]){ j, i }, v_of(TN_F32, i * 3 + j));
    a[7] = tn_array_transpose(b, NULL);
    const char *names[8] = { "c_f4.npy", "c_f8.npy", "c_i4.npy", "c_i8.npy", "c_b1.npy", "c_f2.npy", "c_empty.npy", "c_view.npy" };
    for (int k = 0; k < 8; k++) CHECK(tn_save_npy(at(names[k]), a[k]) == TN_OK, "save %s: %s", names[k], tn_last_error());
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/npy_roundtrip.py check %s", dir);
    CHECK(system(cmd) == 0, "NumPy reads what the library wrote (%s)", cmd);
    for (int k = 0; k < 8; k++) tn_array_free(a[k]);
    tn_array_free(b);
    /* NumPy writes, the library reads */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/npy_roundtrip.py write %s", dir);
    CHECK(system(cmd) == 0, "NumPy wrote its files (%s)", cmd);
    struct { const char *name; tn_dtype t; int nd; int64_t sh[3]; } want[] = {
        { "f4_le.npy", TN_F32, 2, { 3, 4 } }, { "f8_be.npy", TN_F64, 2, { 2, 3 } }, { "i4_be.npy", TN_I32, 1, { 5 } },
        { "i8_f.npy", TN_I64, 3, { 3, 4, 2 } }, { "f2_le.npy", TN_F16, 2, { 2, 5 } }, { "b1.npy", TN_BOOL, 1, { 7 } },
        { "f4_f.npy", TN_F32, 2, { 4, 3 } }, { "scalar.npy", TN_F64, 0, { 0 } }, { "empty.npy", TN_F32, 2, { 0, 3 } },
        { "v2.npy", TN_F32, 2, { 2, 2 } }, { "v3.npy", TN_I64, 1, { 3 } },
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        tn_array *l = tn_load_npy(at(want[k].name));
        CHECK(holds(l, want[k].t, want[k].nd, want[k].sh), "%s: %s", want[k].name, l ? "wrong values, dtype or shape" : tn_last_error());
        tn_array_free(l);
    }
    /* what it refuses, and why */
    tn_clear_error();
    CHECK(!tn_load_npy(at("c8.npy")) && tn_last_result() == TN_ERR_DTYPE && strstr(tn_last_error(), "dtype '<c8'"), "complex: %s", tn_last_error());
    CHECK(!tn_load_npy(at("u2.npy")) && tn_last_result() == TN_ERR_DTYPE && strstr(tn_last_error(), "'<u2'"), "uint16: %s", tn_last_error());
    CHECK(!tn_load_npy(at("truncated.npy")) && tn_last_result() == TN_ERR_INVALID && strstr(tn_last_error(), "is truncated"), "truncated: %s", tn_last_error());
}

/* tn_dtype_from_name agrees with np.dtype(name).name for every alias it takes, and refuses what the library lacks. */
TEST(test_dtype_names_as_numpy) {
    static const char *const aliases[] = { "bool", "bool_", "?", "b1", "|b1", "int32", "i4", "<i4", "intc", "int64", "i8", "<i8", "int",
        "int_", "long", "intp", "float16", "f2", "<f2", "half", "e", "float32", "f4", "<f4", "single", "f", "float64", "f8", "<f8",
        "double", "float", "float_", "d" };
    if (!have_numpy()) { TH_SKIP("no NumPy for /usr/bin/python3: apt-get install python3-numpy"); return; }
    /* an alias this NumPy no longer knows (NumPy 2 dropped float_) prints "-" and is not compared */
    char cmd[2048] = "/usr/bin/python3 -c \"import numpy as np, sys\n"
                     "def name(a):\n    try: return np.dtype(a).name\n    except TypeError: return '-'\n"
                     "[print(name(a)) for a in sys.argv[1:]]\"";
    for (size_t k = 0; k < sizeof aliases / sizeof *aliases; k++) {
        strcat(cmd, " '");
        strcat(cmd, aliases[k]);
        strcat(cmd, "'");
    }
    strcat(cmd, " 2>/dev/null");
    FILE *pp = popen(cmd, "r");
    char line[64];
    for (size_t k = 0; pp && k < sizeof aliases / sizeof *aliases; k++) {
        if (!fgets(line, sizeof line, pp)) { CHECK(0, "NumPy printed nothing for '%s'", aliases[k]); break; }
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, "-")) continue;
        tn_dtype t = tn_dtype_from_name(aliases[k]);
        CHECK(!strcmp(tn_dtype_name(t), line), "'%s': the library says %s, NumPy %s", aliases[k], tn_dtype_name(t), line);
    }
    if (pp) pclose(pp);
    static const char *const bad[] = { "complex64", "uint8", "float128", "F4", "" };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        tn_clear_error();
        CHECK(tn_dtype_from_name(bad[k]) == TN_DTYPE_NONE && tn_last_result() == TN_ERR_DTYPE && strstr(tn_last_error(), "tn_dtype_from_name"),
              "'%s' refused: %s", bad[k], tn_last_error());
    }
    CHECK(tn_dtype_from_name(NULL) == TN_DTYPE_NONE && tn_last_result() == TN_ERR_NULL, "NULL name");
}

TEST(test_npy_errors) {
    FILE *f = fopen(at("junk.npy"), "wb");
    if (f) { fputs("PK\x03\x04 not numpy", f); fclose(f); }
    tn_clear_error();
    CHECK(!tn_load_npy(at("junk.npy")) && tn_last_result() == TN_ERR_INVALID && strstr(tn_last_error(), "is not a .npy file"), "junk: %s", tn_last_error());
    CHECK(!tn_load_npy(at("missing.npy")) && tn_last_result() == TN_ERR_IO && strstr(tn_last_error(), "tn_load_npy: cannot open"), "missing: %s", tn_last_error());
    tn_array *a = make(TN_F32, 1, (int64_t[]){ 3 });
    CHECK(tn_save_npy("/nonexistent-dir/x.npy", a) == TN_ERR_IO && strstr(tn_last_error(), "tn_save_npy: cannot open"), "save: %s", tn_last_error());
    CHECK(tn_save_npy(NULL, a) == TN_ERR_NULL && tn_save_npy(at("n.npy"), NULL) == TN_ERR_NULL, "NULL arguments");
    CHECK(!tn_load_npy(NULL) && tn_last_result() == TN_ERR_NULL, "NULL path");
    tn_array_free(a);
    f = fopen(at("v9.npy"), "wb");
    if (f) { fwrite("\x93NUMPY\x09\x00", 1, 8, f); fclose(f); }
    CHECK(!tn_load_npy(at("v9.npy")) && tn_last_result() == TN_ERR_INVALID && strstr(tn_last_error(), "version 9.0"), "version: %s", tn_last_error());
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/tn_npy_XXXXXX");
    if (!mkdtemp(dir)) { printf("SKIP (no temporary directory)\n"); return 0; }
    TH_RUN(test_npy_self_roundtrip);
    TH_RUN(test_npy_with_numpy);
    TH_RUN(test_npy_errors);
    TH_RUN(test_dtype_names_as_numpy);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    TH_END();
}
