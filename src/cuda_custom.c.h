/* >>cuda_custom: the GPU side of custom ops (tn_custom_op.cuda_source).
 * Included by tensor_cuda.h inside its implementation section, after
 * tn__cuda_kernel_get and tn__cuda_entry_function. The user's source is
 * compiled with NVRTC through the back end's memory and disk kernel caches at
 * prepare (compile) time; run launches the kernel on the back end's stream
 * with the inputs' then the outputs' device pointers and out[0]'s element
 * count. Output buffers are allocated by the executor (contiguous). */

typedef struct tn__cuda_custom_state {
    const tn_custom_op *op;
    tn__CUfunction fn;
} tn__cuda_custom_state;

static bool tn__cuda_custom_supports(const tn_var *node) {
    const tn_custom_op *op = tn_custom_of(node);
    return op && op->cuda_source && op->cuda_kernel && node->n_in + node->n_out <= 64;
}

static tn_result tn__cuda_custom_prepare(const tn_var *node, void **state) {
    *state = NULL;
    const tn_custom_op *op = tn_custom_of(node);
    if (!op || !op->cuda_source || !op->cuda_kernel)
        return tn__err(TN_ERR_INTERNAL, "tn_cuda: node %d is not a custom op with CUDA source", node->id);
    tn__kentry *e;
    tn_result r = tn__cuda_kernel_get(op->cuda_source, tn__cuda.arch, tn_get_config()->fast_math, &e);
    if (r != TN_OK)
        return tn__err(r, "tn_custom: op '%s': compiling its CUDA source failed: %s", op->name, tn_last_error());
    tn__CUfunction fn;
    if ((r = tn__cuda_entry_function(e, op->cuda_kernel, &fn)) != TN_OK)
        return tn__err(r, "tn_custom: op '%s': kernel '%s' not found in its source (is it extern \"C\"?): %s",
                       op->name, op->cuda_kernel, tn_last_error());
    tn__cuda_custom_state *st = (tn__cuda_custom_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_custom: op '%s': out of memory", op->name);
    st->op = op;
    st->fn = fn;
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_custom_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    tn__cuda_custom_state *st = (tn__cuda_custom_state *)state;
    const tn_custom_op *op = st->op;
    tn_result r = tn__cuda_bind();
    if (r != TN_OK) return r;
    int n_in = node->n_in, n_out = node->n_out > 0 ? node->n_out : 1;
    void *ptrs[64], *params[65];
    long long n = (long long)tn_array_size(out[0]);
    for (int o = 0; o < n_in + n_out; o++) {
        const tn_array *a = o < n_in ? in[o] : out[o - n_in];
        if (a->device != tn__cuda.ordinal)
            return tn__err(TN_ERR_DEVICE, "tn_custom: op '%s': %s %d lives on %s, not cuda%d", op->name, o < n_in ? "input" : "output",
                           o < n_in ? o : o - n_in, a->device == TN_HOST ? "the host" : "another device", tn__cuda.ordinal);
        if (!tn_array_is_contiguous(a))
            return tn__err(TN_ERR_UNSUPPORTED, "tn_custom: op '%s': %s %d is not contiguous", op->name, o < n_in ? "input" : "output",
                           o < n_in ? o : o - n_in);
        ptrs[o] = a->data;
        params[o] = &ptrs[o];
    }
    params[n_in + n_out] = &n;
    unsigned grid[3] = { 1, 1, 1 }, block[3] = { 256, 1, 1 };
    if (op->cuda_geometry) op->cuda_geometry(op, in, out, grid, block);
    else {
        long long blocks = (n + 255) / 256;
        grid[0] = (unsigned)(blocks < 1 ? 1 : blocks > 2147483647LL ? 2147483647LL : blocks);
    }
    if (n == 0 && !op->cuda_geometry) return TN_OK;
    char who[128];
    snprintf(who, sizeof who, "tn_custom: op '%s' (kernel %s, node %d)", op->name, op->cuda_kernel, node->id);
    TN__CU_CHECK(tn__cuda.cu.cuLaunchKernel(st->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                                            tn__cuda.stream, params, NULL), who);
    if (tn_get_config()->launch_blocking) TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda.stream), who);
    return TN_OK;
}

static void tn__cuda_custom_release(void *state) { tn__free(state); }
