/* tests/scan_device.h - a scan's gradient compiled with or without the device
   back end, and what its compiled scan nodes run, for tests/test_cuda_func.c
   and tests/test_place_rewire.c (after scan_seed.h and the implementation). */
#ifndef TN_TEST_SCAN_DEVICE_H
#define TN_TEST_SCAN_DEVICE_H

/* Steps of f that are transfers (GpuFromHost, HostFromGpu): what a device
   loop must not run per step. */
static int func_transfers(const tn_func *f) {
    int n = 0;
    for (int k = 0; f && k < f->n_steps; k++) n += tn__op_kind(f->steps[k].node->op) == TN_OPK_TRANSFER;
    return n;
}

/* The compiled scan nodes of f: how many, how many on the device, and the
   transfers their device steps run per step (must be 0). */
static void scan_steps(const tn_func *f, int *n, int *on_dev, int *step_transfers) {
    *n = *on_dev = *step_transfers = 0;
    for (int k = 0; k < f->n_steps; k++) {
        const tn_var *v = f->steps[k].node;
        if (v->op != TN_OP_SCAN) continue;
        const tn__scan *s = (const tn__scan *)v->ext;
        (*n)++;
        if (v->device == TN_HOST) continue;
        (*on_dev)++;
        *step_transfers += s->dfn ? func_transfers(s->dfn) : 1000;
    }
}

/* h(t) = tanh(W h(t-1) + x(t)); cost sum(H * C) */
static tn_result rnn_grad_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_tanh(tn_add(tn_dot(s->non_seq[0], s->out[0][0]), s->seq[0][0]));
    return TN_OK;
}

/* d cost / d (W, X, h0) compiled with the device back end or without any;
   with fwd, also H alone (a second function of the same scan). */
static tn_func *rnn_grad_fn(tn_graph *g, bool device, tn_var **ins, tn_func **fwd) {
    const tn_backend *be = tn__get_backend();
    if (!device) tn__set_backend(NULL);
    ins[0] = tn_matrix(g, "W", TN_F64); ins[1] = tn_matrix(g, "X", TN_F64); ins[2] = tn_vector(g, "h0", TN_F64);
    ins[3] = tn_matrix(g, "C", TN_F64);
    tn_scan_seq seq = { ins[1], 0, NULL };
    tn_scan_out out = { ins[2], 0, NULL };
    tn_var *H = NULL, *gr[3] = { NULL, NULL, NULL };
    tn_func *f = NULL;
    if (fwd) *fwd = NULL;
    if (tn_scan(&(tn_scan_desc){ .step = rnn_grad_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1, .outputs = &out,
                                 .n_non_sequences = 1, .non_sequences = &ins[0], .name = "rnn" }, &H, NULL, NULL) == TN_OK) {
        tn_var *cost = tn_sum(tn_mul(H, ins[3]), NULL, 0, false);
        if (tn_grad(cost, 3, ins, gr, NULL) == TN_OK)
            f = tn_function(g, &(tn_func_desc){ .n_inputs = 4, .inputs = ins, .n_outputs = 3, .outputs = gr });
        if (fwd) *fwd = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &H });
    }
    tn__set_backend(be);
    return f;
}

#endif
