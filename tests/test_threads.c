/* Threads: different functions run concurrently; one function called from
   several threads at once either answers right or says TN_ERR_BUSY;
   functions holding one scan take turns in its loop; two
   functions updating one shared variable lose no update; tn_init raced; the
   CPU pool under concurrent and nested jobs; the host pool's large blocks
   taken and given back by several threads at once. Also built with
   -fsanitize=thread (make tsan), where a data race fails the run. */
#define _POSIX_C_SOURCE 200809L     /* pthread barriers */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <pthread.h>
#include <stdatomic.h>

#define NT 4
#define N_ELEMS 20000        /* above the CPU kernels' grain: the pool is used */

static pthread_barrier_t th_bar;

/* Random in [-2, 2] with NaN, inf, -inf and -0 in the first places. */
static tn_array *input(uint64_t seed) {
    tn_array *a = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ N_ELEMS }, -2, 2, seed);
    const double edge[] = { NAN, INFINITY, -INFINITY, -0.0 };
    for (int64_t i = 0; i < 4; i++) tn_array_set(a, &i, edge[i]);
    return a;
}

/* y = exp(x * k) - k, checked elementwise against double math (k != 0). */
static bool check_exp(const tn_array *x, const tn_array *y, double k) {
    if (!y || y->ndim != 1 || y->shape[0] != N_ELEMS) return false;
    for (int64_t i = 0; i < N_ELEMS; i++) {
        double xv = tn_array_get(x, &i), ref = exp(xv * k) - k, got = tn_array_get(y, &i);
        if (!th_close(got, ref, 1e-5, 1e-5)) return false;
    }
    return true;
}

typedef struct job {
    tn_func *f;
    double k;
    int calls, ok, busy, wrong, other;
    char msg[1024];
} job;

static void *run_job(void *arg) {
    job *j = (job *)arg;
    tn_array *x = input(100 + (uint64_t)(j->k * 7));
    pthread_barrier_wait(&th_bar);
    for (int c = 0; c < j->calls; c++) {
        tn_array *y = NULL;
        tn_result r = tn_call(j->f, &x, &y);
        if (r == TN_OK) { if (check_exp(x, y, j->k)) j->ok++; else j->wrong++; }
        else if (r == TN_ERR_BUSY) {
            j->busy++;
            snprintf(j->msg, sizeof j->msg, "%s", tn_last_error());
        } else { j->other++; snprintf(j->msg, sizeof j->msg, "%s", tn_last_error()); }
        tn_array_free(y);
    }
    tn_array_free(x);
    return NULL;
}

static tn_func *exp_fn(tn_graph *g, double k, const char *name) {
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_sub(tn_exp(tn_mul(x, tn_scalar_const(g, k))), tn_scalar_const(g, k));
    return tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .name = name });
}

TEST(test_different_functions_concurrently) {
    tn_graph *g = tn_graph_new();
    job jobs[NT];
    pthread_t t[NT];
    pthread_barrier_init(&th_bar, NULL, NT);
    for (int i = 0; i < NT; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].k = 0.5 + 0.25 * i;
        jobs[i].calls = 30;
        jobs[i].f = exp_fn(g, jobs[i].k, "f_k");
        CHECK(jobs[i].f, "compile: %s", tn_last_error());
    }
    for (int i = 0; i < NT; i++) pthread_create(&t[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < NT; i++) {
        CHECK(jobs[i].ok == jobs[i].calls, "thread %d: %d of %d right, %d wrong, %d busy, %d failed (%s)", i, jobs[i].ok,
              jobs[i].calls, jobs[i].wrong, jobs[i].busy, jobs[i].other, jobs[i].msg);
        tn_function_free(jobs[i].f);
    }
    pthread_barrier_destroy(&th_bar);
    tn_graph_free(g);
}

TEST(test_one_function_many_threads) {
    tn_graph *g = tn_graph_new();
    tn_func *f = exp_fn(g, 1.5, "shared_f");
    CHECK(f, "compile: %s", tn_last_error());
    job jobs[NT];
    pthread_t t[NT];
    pthread_barrier_init(&th_bar, NULL, NT);
    for (int i = 0; i < NT; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].f = f; jobs[i].k = 1.5; jobs[i].calls = 60;
    }
    for (int i = 0; i < NT; i++) pthread_create(&t[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
    int ok = 0, busy = 0;
    for (int i = 0; i < NT; i++) {
        ok += jobs[i].ok; busy += jobs[i].busy;
        CHECK(jobs[i].wrong == 0 && jobs[i].other == 0, "thread %d: %d wrong results, %d other failures (%s)", i,
              jobs[i].wrong, jobs[i].other, jobs[i].msg);
        if (jobs[i].busy)
            CHECK(strstr(jobs[i].msg, "tn_call") && strstr(jobs[i].msg, "shared_f"), "busy message '%s' names neither tn_call nor the function", jobs[i].msg);
    }
    CHECK(ok + busy == NT * 60 && ok > 0, "%d right + %d busy of %d calls", ok, busy, NT * 60);
    /* after the threads, the function works as before */
    tn_array *x = input(5), *y = NULL;
    CHECK(tn_call(f, &x, &y) == TN_OK && check_exp(x, y, 1.5), "call after the threads: %s", tn_last_error());
    tn_array_free(x); tn_array_free(y);
    pthread_barrier_destroy(&th_bar);
    tn_function_free(f);
    tn_graph_free(g);
}

/* A call while the function runs gets TN_ERR_BUSY, deterministically. */
/* Functions that hold the same scan, called at once from several threads:
   the scan's loop state (its step's views, scratch) is taken in turns, so
   every call is right and none is busy. */
static tn_result rnn_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_tanh(tn_add(tn_dot(s->non_seq[0], s->out[0][0]), s->seq[0][0]));
    return TN_OK;
}

typedef struct scan_job {
    tn_func *f;
    tn_array **in;
    const tn_array *ref;
    int calls, ok, wrong, failed;
    char msg[1024];
} scan_job;

static void *run_scan_job(void *arg) {
    scan_job *j = (scan_job *)arg;
    pthread_barrier_wait(&th_bar);
    for (int c = 0; c < j->calls; c++) {
        tn_array *y = NULL;
        if (tn_call(j->f, j->in, &y) != TN_OK) { j->failed++; snprintf(j->msg, sizeof j->msg, "%s", tn_last_error()); continue; }
        bool same = y->ndim == j->ref->ndim && tn_array_nbytes(y) == tn_array_nbytes(j->ref) && !memcmp(y->data, j->ref->data, tn_array_nbytes(y));
        if (same) j->ok++; else j->wrong++;
        tn_array_free(y);
    }
    return NULL;
}

TEST(test_one_scan_many_functions) {
    tn_graph *g = tn_graph_new();
    tn_var *in[3] = { tn_matrix(g, "W", TN_F64), tn_matrix(g, "X", TN_F64), tn_vector(g, "h0", TN_F64) }, *H = NULL;
    tn_scan_seq seq = { in[1], 0, NULL };
    tn_scan_out out = { in[2], 0, NULL };
    CHECK(tn_scan(&(tn_scan_desc){ .step = rnn_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1, .outputs = &out,
                                   .n_non_sequences = 1, .non_sequences = &in[0], .name = "rnn" }, &H, NULL, NULL) == TN_OK,
          "tn_scan: %s", tn_last_error());
    tn_array *v[3] = { tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ 8, 8 }, -0.5, 0.5, 1),
                       tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ 40, 8 }, -1, 1, 2),
                       tn_array_rand_uniform(TN_F64, 1, (int64_t[]){ 8 }, -1, 1, 3) };
    scan_job jobs[NT];
    tn_array *ref[NT];
    pthread_t t[NT];
    pthread_barrier_init(&th_bar, NULL, NT);
    for (int i = 0; i < NT; i++) {          /* H * (i + 1): each function runs the same scan */
        tn_var *y = tn_mul(H, tn_scalar_const(g, i + 1.0));
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].f = H ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = in, .n_outputs = 1, .outputs = &y }) : NULL;
        CHECK(jobs[i].f, "compile: %s", tn_last_error());
        ref[i] = NULL;
        if (jobs[i].f) CHECK(tn_call(jobs[i].f, v, &ref[i]) == TN_OK, "reference call: %s", tn_last_error());
        jobs[i].in = v; jobs[i].ref = ref[i]; jobs[i].calls = 30;
    }
    bool ready = true;
    for (int i = 0; i < NT; i++) ready = ready && jobs[i].f && ref[i];
    for (int i = 0; ready && i < NT; i++) pthread_create(&t[i], NULL, run_scan_job, &jobs[i]);
    for (int i = 0; ready && i < NT; i++) pthread_join(t[i], NULL);
    for (int i = 0; ready && i < NT; i++)
        CHECK(jobs[i].ok == jobs[i].calls, "thread %d: %d of %d right, %d wrong, %d failed (%s)", i, jobs[i].ok, jobs[i].calls,
              jobs[i].wrong, jobs[i].failed, jobs[i].msg);
    for (int i = 0; i < NT; i++) { tn_function_free(jobs[i].f); tn_array_free(ref[i]); }
    for (int i = 0; i < 3; i++) tn_array_free(v[i]);
    pthread_barrier_destroy(&th_bar);
    tn_graph_free(g);
}

TEST(test_busy_is_reported) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_exp(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .name = "busy_f" });
    CHECK(f, "compile: %s", tn_last_error());
    /* mark it running as a concurrent caller would, then call */
    atomic_flag_test_and_set(&f->busy);
    tn_array *in = input(9), *out = NULL;
    CHECK(tn_call(f, &in, &out) == TN_ERR_BUSY, "a call while running must be TN_ERR_BUSY");
    CHECK_ERR(TN_ERR_BUSY, "busy_f");
    CHECK(strstr(tn_last_error(), "tn_call") != NULL, "'%s' lacks tn_call", tn_last_error());
    CHECK(out == NULL, "a busy call writes no output");
    CHECK(!strcmp(tn_result_string(TN_ERR_BUSY), "TN_ERR_BUSY"), "%s", tn_result_string(TN_ERR_BUSY));
    atomic_flag_clear(&f->busy);
    CHECK(tn_call(f, &in, &out) == TN_OK, "after: %s", tn_last_error());
    tn_array_free(out); tn_array_free(in);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Two functions each doing acc = acc + 1 (and a reader of acc) from
   different threads: no update is lost, and the reader sees whole values. */
typedef struct counter { tn_func *f; int n; int fails; char msg[1024]; tn_var *acc; double last; bool reader; } counter;
static void *run_counter(void *arg) {
    counter *c = (counter *)arg;
    pthread_barrier_wait(&th_bar);
    for (int i = 0; i < c->n; i++) {
        tn_array *out[2] = { NULL, NULL };
        tn_result r = tn_call(c->f, NULL, c->reader ? out : NULL);
        if (r != TN_OK) { c->fails++; snprintf(c->msg, sizeof c->msg, "%s", tn_last_error()); continue; }
        if (c->reader) {
            /* acc and twice are updated together: a reader sees twice == 2 * acc */
            double v = tn_array_get(out[0], NULL), w = tn_array_get(out[1], NULL);
            if (v < c->last || v != floor(v) || w != 2 * v) c->fails++;
            c->last = v;
            tn_array_free(out[0]); tn_array_free(out[1]);
        }
        if (i % 64 == 0) {       /* the value API takes the same lock */
            tn_array *v = tn_shared_get_value(c->acc);
            if (!v || tn_array_get(v, NULL) != floor(tn_array_get(v, NULL))) c->fails++;
            tn_array_free(v);
        }
    }
    return NULL;
}

TEST(test_shared_variable_updates_not_lost) {
    tn_graph *g = tn_graph_new();
    tn_array *zero = tn_array_scalar(TN_F64, 0);
    tn_array *zero2 = tn_array_scalar(TN_F64, 0);
    tn_var *acc = tn_shared(g, "acc", zero);
    tn_var *twice = tn_shared(g, "twice", zero2);
    tn_array_free(zero); tn_array_free(zero2);
    tn_var *one = tn_scalar_const(g, 1.0), *two = tn_scalar_const(g, 2.0);
    /* f1 takes acc then twice, f2 twice then acc: the locks still go in one order */
    tn_update u1[2] = { { acc, tn_add(acc, one) }, { twice, tn_add(twice, two) } };
    tn_update u2[2] = { { twice, tn_add(twice, two) }, { acc, tn_add(acc, one) } };
    tn_func *f1 = tn_function(g, &(tn_func_desc){ .n_updates = 2, .updates = u1, .name = "inc1" });
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_updates = 2, .updates = u2, .name = "inc2" });
    tn_var *rd[2] = { tn_mul(acc, one), tn_mul(twice, one) };
    tn_func *fr = tn_function(g, &(tn_func_desc){ .n_outputs = 2, .outputs = rd, .name = "reader" });
    CHECK(f1 && f2 && fr, "compile: %s", tn_last_error());
    enum { N = 3000 };
    counter c[3] = { { .f = f1, .n = N, .acc = acc }, { .f = f2, .n = N, .acc = acc },
                     { .f = fr, .n = N, .acc = acc, .reader = true } };
    pthread_t t[3];
    pthread_barrier_init(&th_bar, NULL, 3);
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, run_counter, &c[i]);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 3; i++) CHECK(c[i].fails == 0, "thread %d: %d failures (%s)", i, c[i].fails, c[i].msg);
    tn_array *v = tn_shared_get_value(acc), *w = tn_shared_get_value(twice);
    CHECK(v && tn_array_get(v, NULL) == 2.0 * N, "acc = %g, want %d", v ? tn_array_get(v, NULL) : NAN, 2 * N);
    CHECK(w && tn_array_get(w, NULL) == 4.0 * N, "twice = %g, want %d", w ? tn_array_get(w, NULL) : NAN, 4 * N);
    tn_array_free(v); tn_array_free(w);
    pthread_barrier_destroy(&th_bar);
    tn_function_free(f1); tn_function_free(f2); tn_function_free(fr);
    tn_graph_free(g);
}

/* tn_init from several threads at once: one configuration wins whole, and
   its cache_dir is the library's copy (the caller's buffer and the parsing
   thread are gone). */
static char th_long_dir[2048];
typedef struct initer { tn_config cfg; tn_result r; } initer;
static void *run_init(void *arg) {
    initer *in = (initer *)arg;
    pthread_barrier_wait(&th_bar);
    for (int i = 0; i < 50 && in->r == TN_OK; i++) {
        in->r = tn_init(&in->cfg);
        const tn_config *c = tn_get_config();
        if (c->floatX != TN_F32 || !c->cache_dir || strcmp(c->cache_dir, th_long_dir)) in->r = TN_ERR_INTERNAL;
    }
    return NULL;
}
static void *parse_in_thread(void *arg) {
    char flags[2100];
    snprintf(flags, sizeof flags, "device=cpu,cache_dir=%s", th_long_dir);
    tn_parse_flags(flags, (tn_config *)arg);
    return NULL;
}

TEST(test_init_raced) {
    memset(th_long_dir, 'd', sizeof th_long_dir - 1);        /* longer than any fixed buffer */
    th_long_dir[0] = '/';
    tn_config parsed = { .floatX = TN_F32, .allow_gc = true };
    pthread_t p;
    pthread_create(&p, NULL, parse_in_thread, &parsed);
    pthread_join(p, NULL);                                  /* the parsing thread has exited */
    CHECK(parsed.cache_dir && !strcmp(parsed.cache_dir, th_long_dir), "parsed cache_dir is %.40s...",
          parsed.cache_dir ? parsed.cache_dir : "(null)");
    initer in[NT];
    pthread_t t[NT];
    pthread_barrier_init(&th_bar, NULL, NT);
    for (int i = 0; i < NT; i++) { in[i].cfg = parsed; in[i].r = TN_OK; }
    for (int i = 0; i < NT; i++) pthread_create(&t[i], NULL, run_init, &in[i]);
    for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < NT; i++) CHECK(in[i].r == TN_OK, "thread %d: %s", i, tn_result_string(in[i].r));
    const tn_config *c = tn_get_config();
    CHECK(c->device == TN_DEVICE_CPU && c->cache_dir && c->cache_dir != th_long_dir && !strcmp(c->cache_dir, th_long_dir),
          "config after the race: device %d, cache_dir %p", (int)c->device, (const void *)c->cache_dir);
    pthread_barrier_destroy(&th_bar);
    CHECK(tn_init(NULL) == TN_OK, "%s", tn_last_error());  /* back to TENSOR_FLAGS */
}

/* Jobs for the CPU pool from several threads, each job's kernel starting a
   nested one: every element is visited exactly once, nothing deadlocks. */
typedef struct pjob { atomic_int *hits; int64_t n; } pjob;
static void inner_range(void *ctx, int64_t lo, int64_t hi) {
    pjob *j = (pjob *)ctx;
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
}
static void outer_range(void *ctx, int64_t lo, int64_t hi) {
    pjob *j = (pjob *)ctx;
    pjob sub = { j->hits + lo, hi - lo };
    tn__parallel_for(sub.n, 16, inner_range, &sub);
}
static void *run_pool(void *arg) {
    pjob *j = (pjob *)arg;
    pthread_barrier_wait(&th_bar);
    for (int r = 0; r < 20; r++) tn__parallel_for(j->n, 64, outer_range, j);
    return NULL;
}
TEST(test_pool_concurrent_and_nested) {
    enum { N = 4096 };
    static atomic_int hits[NT][N];
    pjob jobs[NT];
    pthread_t t[NT];
    pthread_barrier_init(&th_bar, NULL, NT);
    for (int i = 0; i < NT; i++) {
        for (int k = 0; k < N; k++) atomic_init(&hits[i][k], 0);
        jobs[i].hits = hits[i]; jobs[i].n = N;
    }
    for (int i = 0; i < NT; i++) pthread_create(&t[i], NULL, run_pool, &jobs[i]);
    for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
    int bad = 0;
    for (int i = 0; i < NT; i++)
        for (int k = 0; k < N; k++) bad += atomic_load(&hits[i][k]) != 20;
    CHECK(bad == 0, "%d elements not visited exactly 20 times", bad);
    pthread_barrier_destroy(&th_bar);
}

/* A job's pieces, whichever thread claims each: every piece runs once and
   whole, none is empty, the pieces cover [0, n), each at least the grain
   long (but in the last range, which may be short), no two lengths more
   than 1 apart (but there), no more pieces than threads times
   TN__POOL_PIECES, and as many ranges (workers woken) as one range a thread
   makes. Repeated so that workers wake late, early and while the caller
   claims. */
enum { RJ_MAX = 64 * TN__POOL_PIECES };
typedef struct rjob { atomic_int count; int64_t lo[RJ_MAX], hi[RJ_MAX]; atomic_int *hits; } rjob;
static void record_range(void *ctx, int64_t lo, int64_t hi) {
    rjob *j = (rjob *)ctx;
    int k = atomic_fetch_add(&j->count, 1);
    if (k < RJ_MAX) { j->lo[k] = lo; j->hi[k] = hi; }
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
}
TEST(test_pool_ranges) {
    enum { NMAX = 5000 };
    static atomic_int hits[NMAX];
    static const int64_t ns[] = { 1, 2, 15, 16, 17, 272, 1000, 4097, NMAX };
    static const int64_t grains[] = { 1, 3, 17, 64 };
    int nt = tn__num_threads(), bad = 0;
    for (int rep = 0; rep < 50; rep++)
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (size_t b = 0; b < sizeof grains / sizeof *grains; b++) {
                int64_t n = ns[a], g = grains[b];
                static rjob j;
                atomic_init(&j.count, 0);
                j.hits = hits;
                for (int64_t i = 0; i < n; i++) atomic_init(&hits[i], 0);
                tn__parallel_for(n, g, record_range, &j);
                int k = atomic_load(&j.count);
                /* the ranges: min(threads, n / grain) of n / that */
                int64_t want = n / g < nt ? n / g : nt, per = want > 1 ? (n + want - 1) / want : n;
                int parts = want > 1 ? tn__lib.pool.parts : 1;
                int64_t last = (n - 1) / per * per;      /* where the last range starts */
                int64_t maxlen = 0, minlen = INT64_MAX, covered = 0;
                for (int r = 0; r < k && r < RJ_MAX; r++) {
                    int64_t len = j.hi[r] - j.lo[r];
                    if (len <= 0) bad++;
                    if (j.lo[r] < last && len > maxlen) maxlen = len;
                    if (j.lo[r] < last && len < minlen) minlen = len;
                    covered += len;
                }
                for (int64_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
                bool lengths_ok = minlen == INT64_MAX || (minlen >= g && maxlen - minlen <= 1);
                bool ranges_ok = nt == 1 || parts == (n + per - 1) / per;
                if (k < 1 || k > nt * TN__POOL_PIECES || covered != n || !lengths_ok || !ranges_ok) {
                    if (!bad) fprintf(stderr, "n %lld grain %lld: %d pieces in %d ranges (%d threads), %lld items covered, lengths %lld..%lld\n",
                                      (long long)n, (long long)g, k, parts, nt, (long long)covered, (long long)minlen, (long long)maxlen);
                    bad++;
                }
            }
    CHECK(bad == 0, "%d bad pieces or elements not visited exactly once", bad);
}

/* Large arrays (1 to 5 MiB, three size classes, the cap small enough that
   some frees go back to the allocator) made, written and freed by every
   thread: each array holds its own values, whoever had its block before. */
static void *run_blocks(void *arg) {
    int id = *(int *)arg, bad = 0;
    pthread_barrier_wait(&th_bar);
    for (int r = 0; r < 40; r++) {
        int64_t n = (int64_t)(((r + id) % 3) * 2 + 1) << 18;      /* 1, 3, 5 MiB of float32 */
        tn_array *a = tn_array_empty(TN_F32, 1, &n);
        if (!a) return (void *)1;
        float *p = (float *)a->data;
        for (int64_t i = 0; i < n; i += 1024) p[i] = (float)(id * 1000 + r);
        for (int64_t i = 0; i < n; i += 1024) bad += p[i] != (float)(id * 1000 + r);
        tn_array_free(a);
    }
    return bad ? (void *)1 : NULL;
}
TEST(test_host_pool_concurrent) {
    tn_config saved = *tn_get_config(), c = saved;
    c.host_cache_mb = 12;
    tn_init(&c);
    pthread_t t[NT];
    int ids[NT];
    void *res[NT];
    pthread_barrier_init(&th_bar, NULL, NT);
    for (int i = 0; i < NT; i++) { ids[i] = i; pthread_create(&t[i], NULL, run_blocks, &ids[i]); }
    for (int i = 0; i < NT; i++) { pthread_join(t[i], &res[i]); CHECK(!res[i], "thread %d: a block lost its values or an allocation failed", i); }
    pthread_barrier_destroy(&th_bar);
    tn_init(&saved);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_one_scan_many_functions);
    TH_RUN(test_busy_is_reported);
    TH_RUN(test_different_functions_concurrently);
    TH_RUN(test_one_function_many_threads);
    TH_RUN(test_shared_variable_updates_not_lost);
    TH_RUN(test_init_raced);
    TH_RUN(test_pool_concurrent_and_nested);
    TH_RUN(test_pool_ranges);
    TH_RUN(test_host_pool_concurrent);
    tn_shutdown();
    TH_END();
}
