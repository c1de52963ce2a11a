/* >>op_table: the registry of every op. Each part of the catalogue fills the
   rows of its ops; tn__op_def checks once that no row is left empty. */
#include <pthread.h>

static tn_op_def tn__op_defs[TN_OP_COUNT];
static pthread_once_t tn__op_defs_once = PTHREAD_ONCE_INIT;

static void tn__op_defs_fill(void) {
    tn__register_graph_ops(tn__op_defs);    /* src/graph.c.h: leaves, PROJ */
    tn__register_ew_ops(tn__op_defs);       /* src/ops_ew.c.h */
    tn__register_reduce_ops(tn__op_defs);   /* src/ops_reduce.c.h */
    tn__register_linalg_ops(tn__op_defs);   /* src/ops_linalg.c.h */
    tn__register_shape_ops(tn__op_defs);    /* src/ops_shape.c.h */
    tn__register_transfer_ops(tn__op_defs); /* src/transfer.c.h */
    tn__register_scan_ops(tn__op_defs);     /* src/scan.c.h */
    tn__register_custom_ops(tn__op_defs);   /* src/custom.c.h */
}

TN_API const tn_op_def *tn__op_def(int op) {
    pthread_once(&tn__op_defs_once, tn__op_defs_fill);
    if (op <= TN_OP_NONE || op >= TN_OP_COUNT) return NULL;
    return &tn__op_defs[op];
}

TN_API tn_op_kind tn__op_kind(int op) {
    const tn_op_def *d = tn__op_def(op);
    return d ? d->kind : (tn_op_kind)0;
}
