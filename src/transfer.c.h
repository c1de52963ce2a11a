/* >>transfer: host <-> device copy ops.

   GPU_FROM_HOST and HOST_FROM_GPU are ordinary nodes, so placement can insert
   and cancel them, the profiler times them and debugprint shows them as
   Theano does. Device placement (node->device) decides where the output
   lives: the executor allocates it there. GPU_FROM_HOST on the device runs
   through the back end (tn_backend.run); HOST_FROM_GPU is a host node whose
   kernel asks the back end for a staged, stream-ordered copy (tn__d2h_hook),
   or falls back to the device ops' blocking copy. Without a back end both
   are host copies, so a graph that asks for a device result still runs. */

/* Set by tensor_cuda.h: device-to-host copy of in into the host array out
   (contiguous, same shape and dtype), waiting for the stream. */
static tn_result (*tn__d2h_hook)(const tn_var *node, const tn_array *in, tn_array *out);

static tn_result tn__infer_transfer(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)node;
    *out = in[0];
    return TN_OK;
}

/* Host kernel of both ops: a copy into out[0] (converting nothing: same type). */
static tn_result tn__cpu_transfer(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    if (node->op == TN_OP_HOST_FROM_GPU && in[0]->device != TN_HOST && out[0]->device == TN_HOST && tn__d2h_hook)
        return tn__d2h_hook(node, in[0], out[0]);
    return tn_array_assign(out[0], in[0]);
}

static void tn__label_gpu_from_host(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "GpuFromHost<None>"); }
static void tn__label_host_from_gpu(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "HostFromGpu(gpuarray)"); }

static tn_var *tn__transfer_node(tn_var *x, int op, const char *who) {
    if (!x) {
        if (tn_last_result() == TN_OK) tn__err(TN_ERR_NULL, "%s: x is NULL", who);
        return NULL;
    }
    return tn__node(x->graph, op, 1, &x, NULL, NULL, who);
}

TN_API tn_var *tn_gpu_from_host(tn_var *x) { return tn__transfer_node(x, TN_OP_GPU_FROM_HOST, "tn_gpu_from_host"); }
TN_API tn_var *tn_host_from_gpu(tn_var *x) { return tn__transfer_node(x, TN_OP_HOST_FROM_GPU, "tn_host_from_gpu"); }

/* >>registry: fills this part's rows of the op table */
static void tn__register_transfer_ops(tn_op_def *t) {
    t[TN_OP_GPU_FROM_HOST] = (tn_op_def){ "GpuFromHost", TN_OPK_TRANSFER, 1, tn__infer_transfer, tn__cpu_transfer, tn__label_gpu_from_host };
    t[TN_OP_HOST_FROM_GPU] = (tn_op_def){ "HostFromGpu", TN_OPK_TRANSFER, 1, tn__infer_transfer, tn__cpu_transfer, tn__label_host_from_gpu };
}
