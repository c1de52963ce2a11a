/* Array files (tensor.h >>array_files): .npy, .npz and safetensors. Round
   trips with NumPy itself, both ways (tests/npy_roundtrip.py, run with
   Debian's python3-numpy: every dtype, the ints the library widens, both
   byte orders, Fortran order, versions 1.0 to 3.0, 0-d and empty arrays, a
   strided view; np.savez and np.savez_compressed; safetensors written and
   read from the format's description), round trips through the library
   alone, files crafted byte by byte here (ZIP64 fields, damaged deflate
   streams, bad CRCs, shape overflows), and the errors by code and words.
   Without NumPy the NumPy half prints SKIP and counts nothing. */
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

/* v(i) of an unsigned dtype, as tests/npy_roundtrip.py writes it */
static double v_unsigned(int64_t i) { return (double)((i * 37) % 101); }

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

/* a's elements in C order are v(0), v(1), ... of dtype t (unsig: the unsigned formula) */
static bool holds_v(const tn_array *a, tn_dtype t, int nd, const int64_t *sh, bool unsig) {
    if (!a || a->dtype != t || a->ndim != nd || !tn_array_is_contiguous(a)) return false;
    for (int d = 0; d < nd; d++) if (a->shape[d] != sh[d]) return false;
    int64_t n = tn_array_size(a), idx[TN_MAX_DIMS];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int d = nd - 1; d >= 0; d--) { idx[d] = r % sh[d]; r /= sh[d]; }
        if (tn_array_get(a, idx) != (unsig ? v_unsigned(i) : v_of(t, i))) return false;
    }
    return true;
}
static bool holds(const tn_array *a, tn_dtype t, int nd, const int64_t *sh) { return holds_v(a, t, nd, sh, false); }

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
    tn_array *e16 = tn_array_zeros(TN_F16, 2, (int64_t[]){ 0, 3 });
    const char *znames[5] = { "w", "scalar", "flags", "view", "empty" };
    const tn_array *zarr[5] = { a[0], a[1], a[4], a[7], e16 };
    CHECK(tn_save_npz(at("c.npz"), znames, zarr, 5) == TN_OK, "save c.npz: %s", tn_last_error());
    CHECK(tn_save_safetensors(at("c.safetensors"), znames, zarr, 5, "{\"source\": \"tensor.h\", \"q\": \"a \\\"quoted\\\" value\"}") == TN_OK,
          "save c.safetensors: %s", tn_last_error());
    tn_array_free(e16);
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
    tn_array *u2 = tn_load_npy(at("u2.npy"));      /* unsigned ints widen to a dtype that holds them */
    CHECK(u2 && u2->dtype == TN_I32 && u2->shape[0] == 3 && tn_array_get(u2, (int64_t[]){ 2 }) == 0, "uint16 zeros as int32: %s", tn_last_error());
    tn_array_free(u2);
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

static tn_array *load_ok(const char *name) {
    tn_array *a = tn_load_npy(at(name));
    CHECK(a != NULL, "%s: %s", name, tn_last_error());
    return a;
}

/* Ints the library widens (exactly), and dtypes it refuses, as NumPy writes them. */
TEST(test_npy_widened_and_refused) {
    if (!have_numpy()) { TH_SKIP("no NumPy for /usr/bin/python3: apt-get install python3-numpy"); return; }
    struct { const char *name; tn_dtype t; bool unsig; } w[] = {
        { "w_i1.npy", TN_I32, false }, { "w_u1.npy", TN_I32, true }, { "w_i2.npy", TN_I32, false },
        { "w_u2.npy", TN_I32, true }, { "w_u4.npy", TN_I64, true }, { "w_u8.npy", TN_I64, true },
    };
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++) {
        tn_array *a = load_ok(w[k].name);
        CHECK(holds_v(a, w[k].t, 2, (int64_t[]){ 2, 3 }, w[k].unsig), "%s: widened to %s with the same values", w[k].name, tn_dtype_name(w[k].t));
        tn_array_free(a);
    }
    tn_clear_error();
    CHECK(!tn_load_npy(at("u8_big.npy")), "uint64 2^63 refused");
    CHECK_ERR(TN_ERR_DTYPE, "uint64 value 9223372036854775808 (element 1) does not fit int64");
    CHECK(!tn_load_npy(at("struct.npy")), "structured dtype refused");
    CHECK_ERR(TN_ERR_DTYPE, "structured");
    CHECK(!tn_load_npy(at("obj.npy")), "object dtype refused");
    CHECK_ERR(TN_ERR_DTYPE, "dtype '|O' (Python objects) is not supported");
    CHECK(strstr(tn_last_error(), "tn_load_npy: '") && strstr(tn_last_error(), "obj.npy'"), "the message names the file: %s", tn_last_error());
}

/* np.savez (stored) and np.savez_compressed (deflate: fixed, dynamic and stored blocks) */
TEST(test_npz_from_numpy) {
    if (!have_numpy()) { TH_SKIP("no NumPy for /usr/bin/python3: apt-get install python3-numpy"); return; }
    const char *files[2] = { "plain.npz", "small_z.npz" };
    for (int f = 0; f < 2; f++) {
        tn_array_list l;
        CHECK(tn_load_npz(at(files[f]), &l) == TN_OK && l.n == 7, "%s: %s (%d arrays)", files[f], tn_last_error(), l.n);
        CHECK(holds(tn_array_list_get(&l, "w"), TN_F32, 2, (int64_t[]){ 3, 4 }), "%s: w", files[f]);
        CHECK(holds(tn_array_list_get(&l, "b"), TN_F64, 1, (int64_t[]){ 5 }), "%s: big-endian b", files[f]);
        CHECK(holds(tn_array_list_get(&l, "idx"), TN_I64, 3, (int64_t[]){ 2, 3, 2 }), "%s: Fortran-order idx", files[f]);
        CHECK(holds(tn_array_list_get(&l, "mask"), TN_BOOL, 1, (int64_t[]){ 7 }), "%s: mask", files[f]);
        CHECK(holds(tn_array_list_get(&l, "s"), TN_I32, 0, NULL), "%s: 0-d s", files[f]);
        CHECK(holds(tn_array_list_get(&l, "e"), TN_F16, 2, (int64_t[]){ 0, 2 }), "%s: empty e", files[f]);
        CHECK(holds_v(tn_array_list_get(&l, "u"), TN_I32, 1, (int64_t[]){ 4 }, true), "%s: uint8 u", files[f]);
        CHECK(l.metadata == NULL && !strcmp(l.names[0], "w"), "%s: names without .npy, in file order", files[f]);
        tn_clear_error();
        CHECK(!tn_array_list_get(&l, "nope"), "an absent name");
        CHECK_ERR(TN_ERR_INVALID, "no array named 'nope'");
        tn_array_list_free(&l);
        CHECK(l.n == 0 && !l.names && !l.arrays, "freed and zeroed");
    }
    tn_array_list l;
    CHECK(tn_load_npz(at("big_z.npz"), &l) == TN_OK && l.n == 4, "big_z.npz: %s", tn_last_error());
    CHECK(holds(tn_array_list_get(&l, "big"), TN_F32, 2, (int64_t[]){ 300, 70 }), "big");
    CHECK(holds(tn_array_list_get(&l, "ramp"), TN_I64, 1, (int64_t[]){ 5000 }), "ramp");
    CHECK(holds(tn_array_list_get(&l, "ones"), TN_F64, 2, (int64_t[]){ 64, 64 }), "ones");
    tn_random_state *rs = tn_random_state_new(5);     /* the noise: RandomState(5).randint(0, 256, 20000) */
    tn_array *want = tn_rs_randint(rs, TN_I64, 1, (int64_t[]){ 20000 }, 0, 256);
    tn_array *noise = tn_array_list_get(&l, "noise");
    bool same = noise && noise->dtype == TN_I32 && noise->shape[0] == 20000;
    for (int64_t i = 0; same && i < 20000; i++) same = ((const int32_t *)noise->data)[i] == ((const int64_t *)want->data)[i];
    CHECK(same, "noise (deflate's stored blocks) equals RandomState(5)'s draws");
    tn_array_free(want);
    tn_random_state_free(rs);
    tn_array_list_free(&l);
}

TEST(test_safetensors_from_numpy) {
    if (!have_numpy()) { TH_SKIP("no NumPy for /usr/bin/python3: apt-get install python3-numpy"); return; }
    tn_array_list l;
    CHECK(tn_load_safetensors(at("all.safetensors"), &l) == TN_OK && l.n == 14, "all.safetensors: %s (%d)", tn_last_error(), l.n);
    struct { const char *name; tn_dtype t; bool unsig; } w[] = {
        { "cBOOL", TN_BOOL, false }, { "cI8", TN_I32, false }, { "cU8", TN_I32, true }, { "cI16", TN_I32, false },
        { "cU16", TN_I32, true }, { "cI32", TN_I32, false }, { "cU32", TN_I64, true }, { "cI64", TN_I64, false },
        { "cU64", TN_I64, true }, { "cF16", TN_F16, false }, { "cF32", TN_F32, false }, { "cF64", TN_F64, false },
    };
    for (size_t k = 0; k < sizeof w / sizeof w[0]; k++)
        CHECK(holds_v(tn_array_list_get(&l, w[k].name), w[k].t, 2, (int64_t[]){ 2, 3 }, w[k].unsig), "%s", w[k].name);
    CHECK(holds(tn_array_list_get(&l, "scalar"), TN_F64, 0, NULL), "0-d");
    CHECK(holds(tn_array_list_get(&l, "empty"), TN_F32, 2, (int64_t[]){ 0, 4 }), "empty");
    CHECK(l.metadata && !strcmp(l.metadata, "{\"format\": \"pt\", \"note\": \"written by hand\"}"), "metadata kept: %s", l.metadata ? l.metadata : "NULL");
    tn_array_list_free(&l);
    tn_clear_error();
    CHECK(tn_load_safetensors(at("bf16.safetensors"), &l) == TN_ERR_DTYPE && l.n == 0, "BF16 refused");
    CHECK_ERR(TN_ERR_DTYPE, "tensor 'x' has dtype BF16 (bfloat16), which the library does not have");
}

/* .npz and safetensors through the library alone, files and memory: every
   dtype, views, 0-d, empty; NaN, inf, -0 and denormal bits kept. */
TEST(test_sets_self_roundtrip) {
    double specials[6] = { NAN, INFINITY, -INFINITY, -0.0, 5e-324, 1.7976931348623157e308 };
    tn_array *big = make(TN_F32, 2, (int64_t[]){ 6, 5 }), *bt = tn_array_transpose(big, NULL);
    tn_array *arr[9] = { make(TN_BOOL, 1, (int64_t[]){ 5 }), make(TN_I32, 2, (int64_t[]){ 2, 3 }), make(TN_I64, 0, NULL),
                         make(TN_F16, 1, (int64_t[]){ 9 }), make(TN_F32, 3, (int64_t[]){ 2, 1, 3 }),
                         tn_array_from_data(TN_F64, 1, (int64_t[]){ 6 }, specials), tn_array_slice(bt, 1, 1, 6, 2),
                         tn_array_zeros(TN_I32, 2, (int64_t[]){ 3, 0 }),
                         tn_array_broadcast_to(big, 3, (int64_t[]){ 2, 6, 5 }) };
    const char *names[9] = { "bool", "i32", "i64", "f16", "f32", "special", "view", "empty", "bcast" };
    for (int fmt = 0; fmt < 4; fmt++) {
        tn_array_list l;
        void *mem = NULL;
        size_t size = 0;
        tn_result r;
        const tn_array *const *ca = (const tn_array *const *)arr;
        if (fmt == 0) r = tn_save_npz(at("s.npz"), names, ca, 9);
        else if (fmt == 1) r = tn_save_safetensors(at("s.st"), names, ca, 9, NULL);
        else if (fmt == 2) r = tn_save_npz_mem(names, ca, 9, &mem, &size);
        else r = tn_save_safetensors_mem(names, ca, 9, "{}", &mem, &size);
        CHECK(r == TN_OK, "format %d: save: %s", fmt, tn_last_error());
        if (fmt == 0) r = tn_load_npz(at("s.npz"), &l);
        else if (fmt == 1) r = tn_load_safetensors(at("s.st"), &l);
        else if (fmt == 2) r = tn_load_npz_mem(mem, size, &l);
        else r = tn_load_safetensors_mem(mem, size, &l);
        CHECK(r == TN_OK && l.n == 9, "format %d: %s", fmt, tn_last_error());
        if (r != TN_OK) continue;
        for (int k = 0; k < 9; k++) {
            tn_array *g = l.arrays[k];
            bool same = !strcmp(l.names[k], names[k]) && g->dtype == arr[k]->dtype && g->ndim == arr[k]->ndim && tn_array_is_contiguous(g);
            for (int d = 0; same && d < g->ndim; d++) same = g->shape[d] == arr[k]->shape[d];
            int64_t n = same ? tn_array_size(g) : 0, idx[TN_MAX_DIMS];
            for (int64_t i = 0; same && i < n; i++) {
                int64_t q = i;
                for (int d = g->ndim - 1; d >= 0; d--) { idx[d] = q % g->shape[d]; q /= g->shape[d]; }
                double x = tn_array_get(g, idx), y = tn_array_get(arr[k], idx);
                same = memcmp(&x, &y, sizeof x) == 0;
            }
            CHECK(same, "format %d: %s comes back the same, bit for bit", fmt, names[k]);
        }
        CHECK(fmt != 3 || (l.metadata && !strcmp(l.metadata, "{}")), "metadata {} kept");
        tn_array_list_free(&l);
        tn_bytes_free(mem);
    }
    /* the .npy in memory is the file's bytes */
    void *mem;
    size_t size;
    CHECK(tn_save_npy_mem(arr[1], &mem, &size) == TN_OK && tn_save_npy(at("m.npy"), arr[1]) == TN_OK, "npy mem: %s", tn_last_error());
    FILE *f = fopen(at("m.npy"), "rb");
    char buf[512];
    size_t got = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(got == size && size == 128 + 24 && !memcmp(buf, mem, size), "memory and file agree (%zu, %zu bytes)", got, size);
    tn_array *back = tn_load_npy_mem(mem, size);
    CHECK(holds(back, TN_I32, 2, (int64_t[]){ 2, 3 }), "tn_load_npy_mem");
    tn_array_free(back);
    tn_bytes_free(mem);
    for (int k = 0; k < 9; k++) tn_array_free(arr[k]);
    tn_array_free(bt);
    tn_array_free(big);
}

/* Bytes of a one-member zip: the member's name, compression method, CRC,
   uncompressed size and data; zip64: the central entry's sizes and offset
   moved into a ZIP64 extra field. */
static size_t zip_one(uint8_t *z, const char *name, int method, uint32_t crc, uint32_t usize, const void *data, uint32_t csize, bool zip64) {
    size_t n = 0, nl = strlen(name);
#define LE(v, k) do { uint64_t v_ = (v); for (int i_ = 0; i_ < (k); i_++) z[n++] = (uint8_t)(v_ >> (8 * i_)); } while (0)
    LE(0x04034b50u, 4); LE(20, 2); LE(0, 2); LE(method, 2); LE(0, 4); LE(crc, 4); LE(csize, 4); LE(usize, 4); LE(nl, 2); LE(0, 2);
    memcpy(z + n, name, nl); n += nl;
    memcpy(z + n, data, csize); n += csize;
    size_t cd = n;
    LE(0x02014b50u, 4); LE(45, 2); LE(45, 2); LE(0, 2); LE(method, 2); LE(0, 4); LE(crc, 4);
    LE(zip64 ? 0xffffffffu : csize, 4); LE(zip64 ? 0xffffffffu : usize, 4); LE(nl, 2); LE(zip64 ? 28 : 0, 2); LE(0, 2); LE(0, 2); LE(0, 2); LE(0, 4);
    LE(zip64 ? 0xffffffffu : 0, 4);
    memcpy(z + n, name, nl); n += nl;
    if (zip64) { LE(1, 2); LE(24, 2); LE(usize, 8); LE(csize, 8); LE(0, 8); }
    size_t cd_size = n - cd;
    LE(0x06054b50u, 4); LE(0, 4); LE(1, 2); LE(1, 2); LE(cd_size, 4); LE(cd, 4); LE(0, 2);
#undef LE
    return n;
}

static uint32_t crc32_ref(const uint8_t *p, size_t n) {   /* bit by bit, unlike the library's table */
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

TEST(test_npz_crafted) {
    tn_array *a = make(TN_I64, 1, (int64_t[]){ 3 });
    void *npy;
    size_t nn;
    CHECK(tn_save_npy_mem(a, &npy, &nn) == TN_OK, "npy: %s", tn_last_error());
    static uint8_t z[4096];
    tn_array_list l;
    uint32_t crc = crc32_ref((const uint8_t *)npy, nn);
    size_t n = zip_one(z, "a.npy", 0, crc, (uint32_t)nn, npy, (uint32_t)nn, true);
    CHECK(tn_load_npz_mem(z, n, &l) == TN_OK && l.n == 1 && holds(l.arrays[0], TN_I64, 1, (int64_t[]){ 3 }), "ZIP64 extra field: %s", tn_last_error());
    tn_array_list_free(&l);
    n = zip_one(z, "a.npy", 0, crc ^ 1, (uint32_t)nn, npy, (uint32_t)nn, false);
    tn_clear_error();
    CHECK(tn_load_npz_mem(z, n, &l) == TN_ERR_INVALID && l.n == 0, "a wrong CRC");
    CHECK_ERR(TN_ERR_INVALID, "tn_load_npz_mem: memory member 'a.npy': CRC-32 mismatch");
    const uint8_t bad_type[1] = { 0x07 }, short_stored[5] = { 0x01, 0x05, 0x00, 0xfa, 0xff };
    n = zip_one(z, "a.npy", 8, crc, (uint32_t)nn, bad_type, 1, false);
    CHECK(tn_load_npz_mem(z, n, &l) == TN_ERR_INVALID, "deflate block type 3");
    CHECK_ERR(TN_ERR_INVALID, "corrupt deflate data (an invalid block type)");
    n = zip_one(z, "a.npy", 8, crc, (uint32_t)nn, short_stored, 5, false);
    CHECK(tn_load_npz_mem(z, n, &l) == TN_ERR_INVALID, "a stored block cut short");
    CHECK_ERR(TN_ERR_INVALID, "corrupt deflate data (the compressed data ends early)");
    n = zip_one(z, "a.npy", 12, crc, (uint32_t)nn, npy, (uint32_t)nn, false);
    CHECK(tn_load_npz_mem(z, n, &l) == TN_ERR_UNSUPPORTED, "bzip2");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "compression method 12");
    n = zip_one(z, "a.npy", 0, crc, (uint32_t)nn, npy, (uint32_t)nn, false);
    CHECK(tn_load_npz_mem(z, n - 30, &l) == TN_ERR_INVALID, "cut before its directory");
    CHECK_ERR(TN_ERR_INVALID, "not a zip file");
    CHECK(tn_load_npz_mem(npy, nn, &l) == TN_ERR_INVALID, "an .npy is not an .npz");
    CHECK_ERR(TN_ERR_INVALID, "not a zip file");
    CHECK(tn_load_npz(at("none.npz"), &l) == TN_ERR_IO, "a missing file");
    CHECK_ERR(TN_ERR_IO, "tn_load_npz: cannot open '");
    /* the saver checks names before it writes */
    const tn_array *two[2] = { a, a };
    const char *dup[2] = { "x", "x" }, *null_name[2] = { "x", NULL };
    CHECK(tn_save_npz(at("d.npz"), dup, two, 2) == TN_ERR_INVALID, "duplicate names");
    CHECK_ERR(TN_ERR_INVALID, "tn_save_npz: names[0] and names[1] are both 'x'");
    CHECK(tn_save_npz(at("d.npz"), null_name, two, 2) == TN_ERR_INVALID, "a NULL name");
    CHECK_ERR(TN_ERR_INVALID, "names[1] is NULL");
    CHECK(access(at("d.npz"), F_OK) != 0, "nothing written");
    tn_bytes_free(npy);
    tn_array_free(a);
}

/* An .npy header (NumPy's dict text) with no data after it, in buf. */
static size_t npy_with_header(uint8_t *buf, const char *dict) {
    size_t h = strlen(dict);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(h & 0xff), buf[9] = (uint8_t)(h >> 8);
    memcpy(buf + 10, dict, h);
    return 10 + h;
}

TEST(test_files_crafted_errors) {
    uint8_t b[600];
    static const char *const npy_bad[][2] = {
        { "(4611686018427387904, 4)", "tn_load_npy_mem: memory: shape (4611686018427387904, 4) overflows" },
        { "(99999999999999999999,)", "overflows 64 bits" },
        { "(1, 1, 1, 1, 1, 1, 1, 1, 1)", "more dims than TN_MAX_DIMS" },
        { "(2, 3)", "is truncated: shape (2, 3) needs 24 bytes of data" },
        { "(2, 3), 'extra': 1", "a key other than" },
        { "(2,), 'descr': '<c8'", "dtype '<c8' (complex)" },
    };
    const tn_result npy_code[] = { TN_ERR_SHAPE, TN_ERR_SHAPE, TN_ERR_SHAPE, TN_ERR_INVALID, TN_ERR_INVALID, TN_ERR_DTYPE };
    for (size_t k = 0; k < sizeof npy_bad / sizeof npy_bad[0]; k++) {
        char dict[200];
        snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s}\n", npy_bad[k][0]);
        size_t n = npy_with_header(b, dict);
        tn_clear_error();
        CHECK(!tn_load_npy_mem(b, n), "npy case %zu", k);
        CHECK_ERR(npy_code[k], npy_bad[k][1]);
    }
    /* safetensors */
    static const char *const bad[][2] = {
        { "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", "data_offsets [0, 4] do not span the 8 bytes of F32 (2,)" },
        { "{\"x\": {\"dtype\": \"F8_E4M3\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "dtype 'F8_E4M3', which is not supported" },
        { "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", "is truncated: shape (4,) needs 16 bytes" },
        { "{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}", "lacks 'dtype', 'shape' or 'data_offsets'" },
        { "{\"__metadata__\": {\"a\": 1}}", "__metadata__ is not a JSON object of strings" },
        { "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "tensor 'x' appears twice" },
        { "[1, 2]", "the header is not a JSON object" },
    };
    const tn_result code[] = { TN_ERR_INVALID, TN_ERR_DTYPE, TN_ERR_INVALID, TN_ERR_INVALID, TN_ERR_INVALID, TN_ERR_INVALID, TN_ERR_INVALID };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t h = strlen(bad[k][0]);
        memset(b, 0, sizeof b);
        for (int i = 0; i < 8; i++) b[i] = (uint8_t)(h >> (8 * i));
        memcpy(b + 8, bad[k][0], h);
        tn_array_list l;
        tn_clear_error();
        CHECK(tn_load_safetensors_mem(b, 8 + h + 8, &l) == code[k] && l.n == 0, "case %zu: %s", k, tn_last_error());
        CHECK_ERR(code[k], bad[k][1]);
    }
    memset(b, 0xff, 8);
    tn_array_list l;
    CHECK(tn_load_safetensors_mem(b, 20, &l) == TN_ERR_INVALID, "a huge header size");
    CHECK_ERR(TN_ERR_INVALID, "tn_load_safetensors_mem: memory is truncated: the header size is");
    tn_array *a = make(TN_F32, 1, (int64_t[]){ 2 });
    const tn_array *one[1] = { a };
    const char *meta_name[1] = { "__metadata__" }, *x[1] = { "x" };
    void *mem;
    size_t size;
    CHECK(tn_save_safetensors_mem(meta_name, one, 1, NULL, &mem, &size) == TN_ERR_INVALID, "__metadata__ as a name");
    CHECK_ERR(TN_ERR_INVALID, "names[0] is __metadata__, which safetensors reserves");
    CHECK(tn_save_safetensors_mem(x, one, 1, "{\"a\": [1]}", &mem, &size) == TN_ERR_INVALID, "metadata with a list");
    CHECK_ERR(TN_ERR_INVALID, "tn_save_safetensors_mem: metadata is not a JSON object of strings");
    tn_array_free(a);
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
    TH_RUN(test_npy_widened_and_refused);
    TH_RUN(test_npz_from_numpy);
    TH_RUN(test_safetensors_from_numpy);
    TH_RUN(test_sets_self_roundtrip);
    TH_RUN(test_npz_crafted);
    TH_RUN(test_files_crafted_errors);
    TH_RUN(test_dtype_names_as_numpy);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    TH_END();
}
