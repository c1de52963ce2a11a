/* A stand-in device's op table for tests that run on the CPU: the CUDA back
   end's rows, with the stand-in's prepare and run in each (the rows'
   supports() still decide placement, as on a GPU), all but Join's: the
   tests' example of an op without a GPU kernel. Include after
   tensor_cuda.h. */
#ifndef TN_TEST_FAKE_TABLE_H
#define TN_TEST_FAKE_TABLE_H
static const tn_backend_op *const *fake_table(tn_result (*prepare)(const tn_var *, void **),
                                              tn_result (*run)(const tn_var *, void *, tn_array *const *, tn_array *const *)) {
    static const tn_backend_op *ops[TN_OP_COUNT];
    static tn_backend_op rows[TN_OP_COUNT];
    for (int op = 0; op < TN_OP_COUNT; op++) {
        if (!tn__cuda_ops[op] || op == TN_OP_CONCATENATE) continue;   /* the tests' op without a GPU kernel: Join */
        rows[op] = *tn__cuda_ops[op];
        rows[op].prepare = prepare;
        rows[op].run = run;
        rows[op].release = NULL;
        rows[op].stage = NULL;      /* its "graphs" read the host input where it is */
        ops[op] = &rows[op];
    }
    return ops;
}
/* The stand-in device's memory: host memory under a device number. */
static inline tn_result fake_prepare(const tn_var *n, void **s) { (void)n; *s = NULL; return TN_OK; }
static inline void *fake_alloc(int d, size_t b) { (void)d; return malloc(b ? b : 1); }
static inline void fake_free(int d, void *p) { (void)d; free(p); }
static inline tn_result fake_copy(void *dst, int dd, const void *src, int sd, size_t b) {
    (void)dd; (void)sd; memcpy(dst, src, b); return TN_OK;
}
#endif
