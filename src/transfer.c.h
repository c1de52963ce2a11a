/* >>transfer: host <-> device copy ops (in progress, owned by the CUDA back end work) */

/* >>registry: fills this part's rows of the op table */
static void tn__register_transfer_ops(tn_op_def *t) {
    (void)t;
}
