/* >>core: errors, config and flags, memory hooks, dtypes, float16, threads */
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>

#if defined(TN_MALLOC) || defined(TN_REALLOC) || defined(TN_FREE)
#  if !defined(TN_MALLOC) || !defined(TN_REALLOC) || !defined(TN_FREE)
#    error "define all of TN_MALLOC, TN_REALLOC and TN_FREE, or none"
#  endif
#else
#  define TN_MALLOC(n) malloc(n)
#  define TN_REALLOC(p, n) realloc(p, n)
#  define TN_FREE(p) free(p)
#endif
#ifndef TN_ASSERT
#  include <assert.h>
#  define TN_ASSERT(x) assert(x)
#endif
#if !defined(TN_DEBUG_BORROW) && !defined(NDEBUG)
#  define TN_DEBUG_BORROW 1
#endif

/* >>errors */

static _Thread_local tn_result tn__last_result;
static _Thread_local char tn__last_msg[1024];
static tn_log_fn tn__log_fn;
static void *tn__log_user;

TN_API const char *tn_result_string(tn_result r) {
    static const char *const names[] = {
        "TN_OK", "TN_ERR_NULL", "TN_ERR_INVALID", "TN_ERR_SHAPE", "TN_ERR_DTYPE", "TN_ERR_AXIS",
        "TN_ERR_NUM_INPUTS", "TN_ERR_UPDATE", "TN_ERR_GRAPH", "TN_ERR_DISCONNECTED", "TN_ERR_STALE",
        "TN_ERR_OOM", "TN_ERR_DEVICE", "TN_ERR_UNSUPPORTED", "TN_ERR_INTERNAL",
    };
    _Static_assert(sizeof names / sizeof names[0] == TN_RESULT_COUNT, "tn_result_string: one name per result");
    return (unsigned)r < TN_RESULT_COUNT ? names[r] : "TN_ERR_UNKNOWN";
}

TN_API const char *tn_last_error(void) { return tn__last_msg; }
TN_API tn_result tn_last_result(void) { return tn__last_result; }
TN_API void tn_clear_error(void) { tn__last_result = TN_OK; tn__last_msg[0] = 0; }
TN_API void tn_set_log(tn_log_fn fn, void *user) { tn__log_fn = fn; tn__log_user = user; }

TN_API tn_result tn__err(tn_result r, const char *fmt, ...) {
    /* Format into a local first: fmt's arguments may point into tn__last_msg
       (a message that wraps the previous one). */
    char buf[sizeof tn__last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(tn__last_msg, buf, sizeof buf);
    tn__last_result = r;
    if (tn__log_fn) tn__log_fn(TN_LOG_ERROR, tn__last_msg, tn__log_user);
    return r;
}

TN_API void tn__warn(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (tn__log_fn) tn__log_fn(TN_LOG_WARN, buf, tn__log_user);
    else fprintf(stderr, "tensor.h: warning: %s\n", buf);
}

TN_API const char *tn__shape_str(int ndim, const int64_t *shape, char buf[128]) {
    size_t n = 0;
    buf[n++] = '(';
    for (int d = 0; d < ndim && n < 100; d++) {
        if (shape[d] < 0) n += (size_t)snprintf(buf + n, 128 - n, "?");
        else n += (size_t)snprintf(buf + n, 128 - n, "%lld", (long long)shape[d]);
        if (d + 1 < ndim || ndim == 1) n += (size_t)snprintf(buf + n, 128 - n, ndim == 1 ? "," : ", ");
    }
    snprintf(buf + n, 128 - n, ")");
    return buf;
}

/* >>memory */

TN_API void *tn__malloc(size_t n) { return TN_MALLOC(n ? n : 1); }
TN_API void *tn__calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    void *p = TN_MALLOC(bytes ? bytes : 1);
    if (p) memset(p, 0, n * size);
    return p;
}
TN_API void *tn__realloc(void *p, size_t n) { return TN_REALLOC(p, n ? n : 1); }
TN_API void tn__free(void *p) { if (p) TN_FREE(p); }

/* >>dtype */

TN_API size_t tn_dtype_size(tn_dtype t) {
    static const size_t sizes[TN_DTYPE_COUNT] = { 0, 1, 4, 8, 2, 4, 8 };
    return (unsigned)t < TN_DTYPE_COUNT ? sizes[t] : 0;
}

TN_API const char *tn_dtype_name(tn_dtype t) {
    static const char *const names[TN_DTYPE_COUNT] = { "none", "bool", "int32", "int64", "float16", "float32", "float64" };
    return (unsigned)t < TN_DTYPE_COUNT ? names[t] : "invalid";
}

TN_API bool tn_dtype_is_float(tn_dtype t) { return t == TN_F16 || t == TN_F32 || t == TN_F64; }

TN_API tn_dtype tn_dtype_promote(tn_dtype a, tn_dtype b) {
    if (a == TN_DTYPE_NONE) return b;
    if (b == TN_DTYPE_NONE) return a;
    bool fa = tn_dtype_is_float(a), fb = tn_dtype_is_float(b);
    if (fa != fb) return fa ? a : b;        /* an int never widens a float */
    return a > b ? a : b;
}

/* IEEE binary16 <-> binary32, round to nearest even, with subnormals, inf, NaN. */
TN_API uint16_t tn_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                               /* inf or NaN (keep NaN quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                              /* result is subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;     /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                        /* 14..24 */
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13);            /* rebias exponent 127 -> 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

TN_API float tn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e) x = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) x = sign;
    else {                                               /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* >>config */

static tn_config tn__cfg = { .floatX = TN_F32, .allow_gc = true };
static bool tn__cfg_ready;

static bool tn__flag_bool(const char *v, bool *out) {
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "yes")) { *out = true; return true; }
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "no")) { *out = false; return true; }
    return false;
}

/* Parses "k=v,k=v" into cfg; unknown keys and bad values are errors naming them. */
TN_API tn_result tn_parse_flags(const char *flags, tn_config *cfg) {
    if (!cfg) return tn__err(TN_ERR_NULL, "tn_parse_flags: cfg is NULL");
    if (!flags) return TN_OK;
    static _Thread_local char cache_dir[512];
    const char *p = flags;
    while (*p) {
        char item[600];
        size_t n = strcspn(p, ",");
        if (n >= sizeof item) return tn__err(TN_ERR_INVALID, "TENSOR_FLAGS: item too long near '%.40s'", p);
        memcpy(item, p, n);
        item[n] = 0;
        p += n + (p[n] == ',');
        if (!item[0]) continue;
        char *eq = strchr(item, '=');
        if (!eq) return tn__err(TN_ERR_INVALID, "TENSOR_FLAGS: '%s' is not key=value", item);
        *eq = 0;
        const char *k = item, *v = eq + 1;
        bool b, ok = true;
        if (!strcmp(k, "device")) {
            if (!strcmp(v, "cpu")) cfg->device = TN_DEVICE_CPU;
            else if (!strcmp(v, "auto")) cfg->device = TN_DEVICE_AUTO;
            else if (!strncmp(v, "cuda", 4) || !strncmp(v, "gpu", 3)) {
                const char *d = v + (v[0] == 'c' ? 4 : 3);
                char *end;
                long ord = *d ? strtol(d, &end, 10) : 0;
                if (*d && (*end || ord < 0 || ord > 64)) ok = false;
                cfg->device = TN_DEVICE_CUDA;
                cfg->device_ordinal = (int)ord;
            } else ok = false;
        } else if (!strcmp(k, "floatX")) {
            if (!strcmp(v, "float32")) cfg->floatX = TN_F32;
            else if (!strcmp(v, "float64")) cfg->floatX = TN_F64;
            else if (!strcmp(v, "float16")) cfg->floatX = TN_F16;
            else ok = false;
        } else if (!strcmp(k, "mode")) {
            if (!strcmp(v, "fast_run") || !strcmp(v, "FAST_RUN")) cfg->mode = TN_MODE_FAST_RUN;
            else if (!strcmp(v, "fast_compile") || !strcmp(v, "FAST_COMPILE")) cfg->mode = TN_MODE_FAST_COMPILE;
            else if (!strcmp(v, "check") || !strcmp(v, "DebugMode")) cfg->mode = TN_MODE_CHECK;
            else ok = false;
        } else if (!strcmp(k, "assert_no_cpu_op")) {
            if (!strcmp(v, "warn")) cfg->assert_no_cpu_op = TN_WR_WARN;
            else if (!strcmp(v, "raise")) cfg->assert_no_cpu_op = TN_WR_RAISE;
            else if (!strcmp(v, "ignore") || !strcmp(v, "off")) cfg->assert_no_cpu_op = TN_WR_OFF;
            else ok = false;
        } else if (!strcmp(k, "threads")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 0 || t > 1024) ok = false; else cfg->threads = (int)t;
        } else if (!strcmp(k, "cache_dir")) {
            snprintf(cache_dir, sizeof cache_dir, "%s", v);
            cfg->cache_dir = cache_dir;
        }
#define TN__BOOL_FLAG(name, field) else if (!strcmp(k, name)) { if ((ok = tn__flag_bool(v, &b))) cfg->field = b; }
        TN__BOOL_FLAG("profile", profile)
        TN__BOOL_FLAG("fast_math", fast_math)
        TN__BOOL_FLAG("launch_blocking", launch_blocking)
        TN__BOOL_FLAG("print_kernels", print_kernels)
        TN__BOOL_FLAG("allow_gc", allow_gc)
        TN__BOOL_FLAG("allow_tf32", allow_tf32)
        TN__BOOL_FLAG("trace_rewrites", trace_rewrites)
#undef TN__BOOL_FLAG
        else if (!strcmp(k, "cuda_graph")) { if ((ok = tn__flag_bool(v, &b))) cfg->no_cuda_graph = !b; }
        else return tn__err(TN_ERR_INVALID, "TENSOR_FLAGS: unknown flag '%s'", k);
        if (!ok) return tn__err(TN_ERR_INVALID, "TENSOR_FLAGS: bad value '%s' for '%s'", v, k);
    }
    return TN_OK;
}

/* A device back end (tensor_cuda.h) sets this when it is compiled in (from a
   load-time constructor); tn_init calls it so the device flag takes effect. */
static tn_result (*tn__device_init_hook)(const tn_config *cfg);

TN_API tn_result tn_init(const tn_config *cfg) {
    tn_config c = { .floatX = TN_F32, .allow_gc = true };
    if (cfg) {
        c = *cfg;
        if (c.floatX == TN_DTYPE_NONE) c.floatX = TN_F32;
    } else {
        tn_result r = tn_parse_flags(getenv("TENSOR_FLAGS"), &c);
        if (r != TN_OK) return r;
    }
    if (!tn_dtype_is_float(c.floatX))
        return tn__err(TN_ERR_DTYPE, "tn_init: floatX must be a float dtype, not %s", tn_dtype_name(c.floatX));
    tn__cfg = c;
    tn__cfg_ready = true;
    return tn__device_init_hook ? tn__device_init_hook(&tn__cfg) : TN_OK;
}

TN_API const tn_config *tn_get_config(void) {
    if (!tn__cfg_ready && tn_init(NULL) != TN_OK) {
        tn__warn("%s; using defaults", tn_last_error());
        tn__cfg_ready = true;
    }
    return &tn__cfg;
}

/* >>threads: a fixed pool; a job is split into one contiguous range per worker.
   The caller runs the first range itself and waits for the rest. */

#ifndef TN_NO_THREADS
typedef struct tn__pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_t *tid;
    int n;                       /* workers, not counting the caller */
    uint64_t job_id;
    int pending;
    bool quit;
    tn__range_fn fn;
    void *ctx;
    int64_t n_items, chunk;
} tn__pool;
static tn__pool tn__the_pool;
static pthread_once_t tn__pool_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t tn__pool_caller = PTHREAD_MUTEX_INITIALIZER;  /* one job at a time */
static _Thread_local bool tn__in_worker;

static void *tn__pool_main(void *arg) {
    tn__pool *p = &tn__the_pool;
    int me = (int)(intptr_t)arg;                 /* 1..n: range index */
    uint64_t seen = 0;
    tn__in_worker = true;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->job_id == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->job_id;
        tn__range_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t lo = (int64_t)me * p->chunk, hi = lo + p->chunk;
        if (hi > p->n_items) hi = p->n_items;
        pthread_mutex_unlock(&p->mu);
        if (lo < hi) fn(ctx, lo, hi);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void tn__pool_start(void) {
    tn__pool *p = &tn__the_pool;
    int want = tn_get_config()->threads;
    if (want <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        want = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n = 0;
    if (want <= 1) return;
    p->tid = (pthread_t *)tn__calloc((size_t)want - 1, sizeof(pthread_t));
    if (!p->tid) return;
    for (int i = 0; i < want - 1; i++) {
        if (pthread_create(&p->tid[i], NULL, tn__pool_main, (void *)(intptr_t)(i + 1)) != 0) break;
        p->n++;
    }
}

TN_API int tn__num_threads(void) {
    pthread_once(&tn__pool_once, tn__pool_start);
    return tn__the_pool.n + 1;
}

TN_API void tn__parallel_for(int64_t n, int64_t grain, tn__range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = tn__num_threads();
    int64_t parts = n / grain;
    if (parts > nt) parts = nt;
    /* Nested calls and calls racing another job run inline rather than wait. */
    if (parts <= 1 || tn__in_worker || pthread_mutex_trylock(&tn__pool_caller) != 0) { fn(ctx, 0, n); return; }
    tn__pool *p = &tn__the_pool;
    int64_t chunk = (n + parts - 1) / parts;
    pthread_mutex_lock(&p->mu);
    p->fn = fn; p->ctx = ctx; p->n_items = n; p->chunk = chunk;
    p->pending = p->n;
    p->job_id++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    tn__in_worker = true;
    fn(ctx, 0, chunk < n ? chunk : n);
    tn__in_worker = false;
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&tn__pool_caller);
}

static void tn__pool_stop(void) {
    tn__pool *p = &tn__the_pool;
    if (!p->tid) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->tid[i], NULL);
    tn__free(p->tid);
    p->tid = NULL;
    p->n = 0;
}
#else
TN_API int tn__num_threads(void) { return 1; }
TN_API void tn__parallel_for(int64_t n, int64_t grain, tn__range_fn fn, void *ctx) {
    (void)grain;
    if (n > 0) fn(ctx, 0, n);
}
static void tn__pool_stop(void) {}
#endif

/* Back ends hook their own teardown here (tensor_cuda.h). */
static void (*tn__shutdown_hook)(void);

TN_API void tn_shutdown(void) {
    if (tn__shutdown_hook) tn__shutdown_hook();
    tn__pool_stop();
}

/* >>backend: at most one device back end, registered by tensor_cuda.h */
static const tn_backend *tn__backend;
TN_API void tn__set_backend(const tn_backend *b) { tn__backend = b; }
TN_API const tn_backend *tn__get_backend(void) { return tn__backend; }
